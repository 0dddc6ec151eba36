// Silent "sshd"s on several loopback addresses that count how many connections are open at once:
// how many SSH logins a client runs together (issue 51 finding 6: elastic joins run at most
// --ssh-concurrency logins at a time). Each accepts and holds its connections without a banner
// until the client closes them (the client's banner timeout), one thread for all of them.
//
// The count is exact for a client that closes one connection before it opens the next: one
// thread polls every socket and handles the closes it sees before the accepts of the same turn
// (on loopback a FIN has arrived before the next connect even starts).
//
// Same rules as fake_servers.h: addresses outside the sshd fixture's range (127.0.1.X), the
// destructor never blocks for long, constructors throw std::runtime_error, no Catch2 in here.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace hvd::test {

class SilentCrowd {
 public:
  // One listener per address, all on `port` (0: the kernel's choice for the first address, then
  // the same number on the others).
  explicit SilentCrowd(const std::vector<std::string>& addresses, int port = 0);
  ~SilentCrowd();
  SilentCrowd(const SilentCrowd&) = delete;
  SilentCrowd& operator=(const SilentCrowd&) = delete;

  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }  // connections, all addresses together
  int peak_open() const { return peak_.load(); }     // the most open at one time

 private:
  void run();

  int port_ = 0;
  std::vector<int> listeners_;
  int wake_fd_ = -1;
  std::vector<int> conns_;  // the thread's (and the destructor's after join)
  std::atomic<int> accepted_{0};
  std::atomic<int> peak_{0};
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace hvd::test
