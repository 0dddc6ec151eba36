// Which pending connection a listener gives up to make room (issue 51 finding 10). A listener
// keeps the connections still in their handshake in a bounded table, in arrival order; when it is
// full, or the process is out of descriptors, one must go. Under a flood of connections that say
// nothing, the oldest may be the legitimate agent or rank whose preamble came but is not
// answered yet (accepts come in batches): so the oldest connection *without* a whole preamble
// goes first, and only when every one has sent a whole preamble, the oldest. A preamble is
// judged whole or not, never by how much of a token was right.
//
// Pure: the caller says how to tell a whole preamble (a flag, or a peek at the socket).
#pragma once

#include <algorithm>

namespace hvd {

// The connection in [first, last) (oldest first) to evict: the oldest for which
// `has_whole_preamble` is false, else `first`. `last` only for an empty range. Calls the
// predicate on the connections in order, up to the victim.
template <class It, class HasWholePreamble>
It eviction_victim(It first, It last, HasWholePreamble has_whole_preamble) {
  const It victim =
      std::find_if(first, last, [&](const auto& c) { return !has_whole_preamble(c); });
  return victim != last ? victim : first;
}

}  // namespace hvd
