#include "cli/option_docs.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "cli/option_table.h"
#include "common/error.h"

namespace hvd::cli {
namespace {

// Words for values whose name says nothing of them; "a|b|c" value names list their own.
const std::map<std::string, std::string, std::less<>> kValueWords = {
    {"--log-level", "trace debug info warn error off"},
    {"--ssh-host-key-policy", "accept-new strict"},
};

// roff: a backslash is \e, a hyphen in an option name \-, and a line must not start with a
// period or an apostrophe (control lines).
std::string roff(std::string_view text, bool hyphens = false) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-' && hyphens) {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

std::string joined(const std::vector<std::string>& words, std::string_view sep) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : std::string(sep)) + w;
  return out;
}

// zsh's _arguments specs are single-quoted, with ':' separating fields and '[...]' holding the
// description: none of those may appear raw in a description or a value name.
std::string zsh_text(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else if (c == '[' || c == ']') {
      out += c == '[' ? '(' : ')';
    } else if (c == ':') {
      out += ',';
    } else {
      out += c;
    }
  }
  return out;
}

// The first sentence (or the whole of a short description), for a completion menu.
std::string summary(const std::string& description) {
  std::string text = description.substr(0, description.find(". "));
  if (text.size() > 70) text = text.substr(0, 67) + "...";
  return text;
}

}  // namespace

std::vector<OptionDoc> option_docs() {
  CLI::App app{"hvdrun"};
  Options scratch;
  define_options(app, scratch);
  const auto spellings = single_dash_spellings();
  std::vector<OptionDoc> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden: not in --help either
    OptionDoc doc;
    for (const std::string& s : opt->get_snames()) doc.names.push_back("-" + s);
    for (const std::string& l : opt->get_lnames()) {
      doc.names.push_back("--" + l);
      for (const auto& [alias, canonical] : spellings) {
        if (canonical == "--" + l) doc.names.push_back(alias);
      }
    }
    if (doc.names.empty()) continue;  // a positional
    if (doc.names.back() == "--version") doc.names.insert(doc.names.begin(), "-v");
    if (opt->get_expected_min() > 0) {
      doc.values = std::max(1, opt->get_items_expected_min());
      const std::string type = opt->get_type_name();
      doc.value = type.substr(0, type.find(':'));
    }
    doc.description = opt->get_description();
    out.push_back(std::move(doc));
  }
  return out;
}

std::string value_completion(const OptionDoc& option) {
  if (option.values == 0) return "";
  for (const std::string& name : option.names) {
    if (auto it = kValueWords.find(name); it != kValueWords.end()) return it->second;
  }
  if (option.value.find('|') != std::string::npos) {
    std::string words = option.value;
    std::replace(words.begin(), words.end(), '|', ' ');
    return words;
  }
  if (option.value == "FILE" || option.value == "PATH") return "file";
  if (option.value == "DIR") return "dir";
  return "";
}

std::string man_page(const std::string& version) {
  const std::vector<OptionDoc> docs = option_docs();
  std::string out = fmt::format(
      ".\\\" Generated from hvdrun's option table by hvdrun-docgen; edit cli/, not this file.\n"
      ".TH HVDRUN 1 \"\" \"hvdrun {}\" \"User Commands\"\n"
      ".SH NAME\n"
      "hvdrun \\- start data-parallel training jobs over SSH, with horovodrun's command line\n"
      ".SH SYNOPSIS\n.nf\n",
      roff(version));
  for (const std::string& line : usage_lines()) {
    out += "\\fBhvdrun\\fR" + roff(line.substr(std::string_view("hvdrun").size()), true) + "\n";
  }
  out += R"(.fi
.SH DESCRIPTION
\fBhvdrun\fR starts \fICOMMAND\fR once per slot of the hosts given with \fB\-H\fR, a
hostfile or a scheduler's allocation (Slurm, PBS, LSF), each copy a rank of one job. Remote
hosts are reached over SSH: each gets one session that runs hvdrun's agent (this same binary),
which starts the host's ranks. Before any rank starts, the hosts and the launcher check that
they can reach each other on the ports the job uses. The ranks' lines reach hvdrun's own
standard output and error, tagged \fB[1,\fIrank\fB]<stdout>:\fR and
\fB[1,\fIrank\fB]<stderr>:\fR (all on standard error with \fB\-\-json\fR, which keeps
standard output for the result document), and a failed rank ends the job: the other ranks
are stopped and hvdrun exits with the failed rank's code, naming its host and its last lines.
Nothing is left running on any host.
.PP
Programs linked with libhvd (libhvd0) run their collectives over Gloo under hvdrun's own
launch, or over Open MPI with \fB\-\-mpi\fR, which runs \fBmpirun\fR(1) instead of the agents.
\fBhvdrun \-\-check\-ssh\fR diagnoses every host (refused, timeout, host key,
authentication, ...) and says what to do, as a table or, with \fB\-\-json\fR, a document.
.PP
Everything from the first word that is not one of hvdrun's options (or after \fB\-\-\fR) is
the command and its arguments, passed on untouched.
.SH OPTIONS
)";
  for (const OptionDoc& d : docs) {
    std::vector<std::string> names;
    for (const std::string& n : d.names) names.push_back("\\fB" + roff(n, true) + "\\fR");
    out += ".TP\n" + joined(names, ", ");
    if (!d.value.empty()) out += " \\fI" + roff(d.value, true) + "\\fR";
    out += "\n" + roff(d.description) + "\n";
  }
  out += ".SH EXIT STATUS\n";
  const std::pair<ExitCode, std::string_view> codes[] = {
      {ExitCode::kSuccess, "every rank exited 0 (or the check passed)"},
      {ExitCode::kUsage, "bad flags, host list, hostfile, -x or -np"},
      {ExitCode::kNetCheckFailed, "a host cannot reach another host or the launcher"},
      {ExitCode::kSshCheckFailed, "a host failed the SSH check or an SSH stage of a launch"},
      {ExitCode::kInternal, "a bug in hvdrun"},
      {ExitCode::kLauncherFailed, "hvdrun could not do its own part (bind a port, spawn)"},
      {ExitCode::kHostLost, "a host was lost while the job ran"},
      {ExitCode::kStartupTimeout, "a start-up phase did not finish within --start-timeout"},
      {ExitCode::kJobTimeout, "the job ran past --timeout and was stopped"},
      {ExitCode::kStalled, "the ranks stalled past --stall-check-shutdown-time-seconds"},
      {ExitCode::kCannotStart, "the command, its directory or the agent is missing on a host"},
  };
  for (const auto& [code, meaning] : codes) {
    out += fmt::format(".TP\n.B {}\n{}\n", to_int(code), roff(meaning));
  }
  out += R"(.TP
.I other
the first failed rank's exit code, or 128 plus the signal that killed it (137 for SIGKILL);
with \fB\-\-mpi\fR, mpirun's.
.SH ENVIRONMENT
Ranks get Horovod's and torchrun's variables (HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK,
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...), the variables named with
\fB\-x\fR, and their host's login environment. Values never travel on a command line.
\fBNO_COLOR\fR turns colour off in hvdrun's tables.
.SH EXAMPLES
.nf
hvdrun \-np 4 \-H node1:2,node2:2 \-p 2222 ./train
hvdrun \-\-check\-ssh \-H node1,node2 \-p 2222
hvdrun \-\-dry\-run \-np 8 \-\-hostfile hosts ./train
.fi
.SH SEE ALSO
\fBmpirun\fR(1), \fBssh\fR(1), \fBssh_config\fR(5); hvdrun's documentation (docs/cli.md,
docs/check-ssh.md, docs/exit-codes.md in its source tree).
)";
  return out;
}

std::string bash_completion() {
  const std::vector<OptionDoc> docs = option_docs();
  std::vector<std::string> all, one, two;
  std::string value_cases;
  for (const OptionDoc& d : docs) {
    for (const std::string& n : d.names) all.push_back(n);
    if (d.values == 0) continue;
    for (const std::string& n : d.names) (d.values == 1 ? one : two).push_back(n);
    const std::string how = value_completion(d);
    std::string action = "return 0";  // a value hvdrun cannot guess: no completion
    if (how == "file") {
      action = "COMPREPLY=($(compgen -f -- \"$cur\")); return 0";
    } else if (how == "dir") {
      action = "COMPREPLY=($(compgen -d -- \"$cur\")); return 0";
    } else if (!how.empty()) {
      action = "COMPREPLY=($(compgen -W \"" + how + "\" -- \"$cur\")); return 0";
    }
    value_cases += "    " + joined(d.names, "|") + ") " + action + " ;;\n";
  }
  return fmt::format(
      R"(# bash completion for hvdrun(1). Generated from hvdrun's option table by hvdrun-docgen;
# edit cli/, not this file.
_hvdrun() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
  local i=1
  # hvdrun's options and their values; the first other word starts the command.
  while [ "$i" -lt "$COMP_CWORD" ]; do
    case "${{COMP_WORDS[i]}}" in
      --) i=$((i + 1)); break ;;
      {two}) i=$((i + 3)) ;;
      {one}) i=$((i + 2)) ;;
      -*) i=$((i + 1)) ;;
      *) break ;;
    esac
  done
  if [ "$i" -lt "$COMP_CWORD" ]; then  # inside the command: its own completion
    if declare -F _command_offset >/dev/null; then
      _command_offset "$i"
    else
      COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return 0
  fi
  case "$prev" in
{value_cases}  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "{all}" -- "$cur"))
  else
    COMPREPLY=($(compgen -c -- "$cur"))  # the command
  fi
}}
complete -o default -F _hvdrun hvdrun
)",
      fmt::arg("two", two.empty() ? "--never-two-values" : joined(two, "|")),
      fmt::arg("one", joined(one, "|")), fmt::arg("value_cases", value_cases),
      fmt::arg("all", joined(all, " ")));
}

std::string zsh_completion() {
  const std::vector<OptionDoc> docs = option_docs();
  std::string specs;
  for (const OptionDoc& d : docs) {
    const std::string how = value_completion(d);
    std::string action = " ";
    if (how == "file") {
      action = "_files";
    } else if (how == "dir") {
      action = "_files -/";
    } else if (!how.empty()) {
      action = "(" + how + ")";
    }
    std::string values;
    if (d.values == 1) values = ":" + zsh_text(d.value) + ":" + action;
    // Two words (MIN MAX): each its own field.
    if (d.values == 2) {
      const std::string first = d.value.substr(0, d.value.find(' '));
      const std::string second = d.value.substr(d.value.find(' ') + 1);
      values = ":" + zsh_text(first) + ": :" + zsh_text(second) + ": ";
    }
    const bool repeats = d.names.back() == "-x";
    const std::string exclusion = repeats ? "*" : "(" + joined(d.names, " ") + ")";
    for (const std::string& n : d.names) {
      specs +=
          "  '" + exclusion + n + "[" + zsh_text(summary(d.description)) + "]" + values + "' \\\n";
    }
  }
  return "#compdef hvdrun\n"
         "# zsh completion for hvdrun(1). Generated from hvdrun's option table by hvdrun-docgen;\n"
         "# edit cli/, not this file.\n"
         "_arguments -S \\\n" +
         specs + "  '*::command:_normal'\n";
}

}  // namespace hvd::cli
