// MPI mode's pure parts: the mpirun version check, the generated argv for the main cases (hostile
// argument strings included), what mpirun cannot express, and parsing mpirun's output.
#include <map>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "launcher/mpirun/mpi_command.h"
#include "launcher/mpirun/mpi_launcher.h"
#include "test_helpers.h"

using namespace hvd::launcher;
using hvd::test::require_usage_error;
using Args = std::vector<std::string>;

namespace {

Plan plan_for(const std::string& hosts, std::vector<std::string> command,
              const EnvList& env = {{"PATH", "/bin"}}, std::vector<std::string> x = {}) {
  PlanRequest r;
  r.hosts =
      hosts.find('\n') != std::string::npos ? parse_hostfile(hosts, "hf") : parse_host_list(hosts);
  r.default_user = "root";
  r.ssh_port = 2222;
  r.command = std::move(command);
  for (const auto& spec : x) r.forward.push_back(parse_forward_spec(spec));
  return make_plan(r, LocalIdentity{"box", {"127.0.0.1"}}, env);
}

MpiCommandInput input() {
  MpiCommandInput in;
  in.as_root = true;
  in.cwd = "/shared";
  in.host_addresses = {"127.0.0.2", "127.0.0.3"};
  in.ssh.config_file = "/t/ssh_config";
  in.ssh.known_hosts_file = "/t/known_hosts";
  return in;
}

// A TagSplitter whose rank bytes and own lines are kept for the checks.
struct Split {
  std::map<int, std::string> out, err;
  std::vector<std::string> own;
  hvd::launcher::TagSplitter splitter{[this](int rank, bool is_stderr, std::string_view bytes) {
                                        (is_stderr ? err : out)[rank].append(bytes);
                                      },
                                      [this](std::string_view line, bool from_mpirun) {
                                        own.emplace_back(line);
                                        if (!from_mpirun) forged.emplace_back(line);
                                      },
                                      4};
  std::vector<std::string> forged;  // own lines that start with a tag of no rank: rank text
};

}  // namespace

TEST_CASE("mpirun version: Open MPI 4 and 5, others named", "[mpi]") {
  const auto v = parse_mpirun_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to ...\n");
  CHECK(v.major == 4);
  CHECK(v.text == "4.1.4");
  const auto v5 = parse_mpirun_version("mpirun (Open MPI) 5.0.7\n\nReport bugs to ...\n");
  CHECK(v5.major == 5);
  CHECK(v5.text == "5.0.7");
  require_usage_error([] { parse_mpirun_version("mpirun (Open MPI) 6.0.0\n"); },
                      "this mpirun is Open MPI 6.0.0", "Open MPI 4 or 5");
  require_usage_error([] { parse_mpirun_version("mpirun (Open MPI) 3.1.6\n"); },
                      "this mpirun is Open MPI 3.1.6");
  require_usage_error([] { parse_mpirun_version("HYDRA build details:\n    Version: 4.1\n"); },
                      "mpirun is MPICH");
  require_usage_error([] { parse_mpirun_version("Intel(R) MPI Library for Linux* OS\n"); },
                      "mpirun is Intel MPI");
  require_usage_error([] { parse_mpirun_version("bash: mpirun: command not found\n"); },
                      "not Open MPI: \"bash: mpirun: command not found\"");
}

TEST_CASE("mpirun argv: 2 hosts x 2 slots with the hermetic ssh options", "[mpi]") {
  const Plan plan = plan_for("127.0.0.2:2,127.0.0.3:2", {"./train", "--epochs", "3"},
                             {{"PATH", "/bin"}, {"SECRET", "s3cret"}}, {"SECRET"});
  const Args argv = mpirun_argv(plan, input());
  CHECK(argv == Args{"mpirun",
                     "--allow-run-as-root",
                     "-np",
                     "4",
                     "-H",
                     "127.0.0.2:2,127.0.0.3:2",
                     "-bind-to",
                     "none",
                     "-map-by",
                     "slot",
                     "--tag-output",
                     "-mca",
                     "pml",
                     "ob1",
                     "-mca",
                     "btl",
                     "^openib",
                     "-mca",
                     "plm_rsh_no_tree_spawn",
                     "1",
                     "-mca",
                     "plm_rsh_args",
                     "-o BatchMode=yes -o StrictHostKeyChecking=accept-new -F /t/ssh_config -o "
                     "UserKnownHostsFile=/t/known_hosts -p 2222",
                     "-mca",
                     "btl_tcp_if_include",
                     "127.0.0.0/8",
                     "-mca",
                     "oob_tcp_if_include",
                     "127.0.0.0/8",
                     "-x",
                     "PATH",
                     "-x",
                     "SECRET",
                     "-wd",
                     "/shared",
                     "./train",
                     "--epochs",
                     "3"});
  for (const std::string& word : argv) CHECK(word.find("s3cret") == std::string::npos);
}

TEST_CASE("mpirun argv: one machine twice drops vader, strict policy, key, extra args", "[mpi]") {
  MpiCommandInput in = input();
  in.same_machine = true;
  in.ssh.host_key_policy = hvd::ssh::HostKeyPolicy::kStrict;
  in.ssh.identity_file = "/k/id";
  in.extra_args = {"-mca", "btl_base_verbose", "1"};
  in.host_addresses = {"10.0.0.1", "10.0.0.2"};
  const Args argv = mpirun_argv(plan_for("a:1,b:1", {"x"}), in);
  auto after = [&](const std::string& flag) {
    auto it = std::find(argv.begin(), argv.end(), flag);
    return it == argv.end() || it + 1 == argv.end() ? std::string() : *(it + 1);
  };
  CHECK(std::find(argv.begin(), argv.end(), "^openib,vader,ofi") != argv.end());
  CHECK_THAT(after("plm_rsh_args"),
             Catch::Matchers::ContainsSubstring("StrictHostKeyChecking=yes"));
  CHECK_THAT(after("plm_rsh_args"), Catch::Matchers::ContainsSubstring("-i /k/id"));
  CHECK(after("btl_tcp_if_include") == "10.0.0.1/31,10.0.0.2/31");
  CHECK(Args(argv.end() - 4, argv.end()) == Args{"-mca", "btl_base_verbose", "1", "x"});
}

namespace {

// The values of every `-mca NAME VALUE` for NAME in argv, in order.
Args mca_values(const Args& argv, const std::string& name) {
  Args values;
  for (size_t i = 0; i + 2 < argv.size(); ++i) {
    if ((argv[i] == "-mca" || argv[i] == "--mca") && argv[i + 1] == name) {
      values.push_back(argv[i + 2]);
    }
  }
  return values;
}

}  // namespace

TEST_CASE("mpirun argv: Open MPI 5 takes the runtime's parameters with --prtemca, PRRTE's names",
          "[mpi]") {
  // Open MPI 5.0.7 silently drops `-mca plm_rsh_args` (its daemons' ssh went to port 22):
  // the ssh options must be PRRTE's plm_ssh_* through --prtemca.
  MpiCommandInput in = input();
  in.mpi_major = 5;
  const Plan plan = plan_for("127.0.0.2:2,127.0.0.3:2", {"./train"});
  CHECK(mpirun_argv(plan, in) == Args{"mpirun",
                                      "--allow-run-as-root",
                                      "-np",
                                      "4",
                                      "-H",
                                      "127.0.0.2:2,127.0.0.3:2",
                                      "--bind-to",
                                      "none",
                                      "--map-by",
                                      "slot",
                                      "--tag-output",
                                      "--mca",
                                      "pml",
                                      "ob1",
                                      "--prtemca",
                                      "plm_ssh_no_tree_spawn",
                                      "1",
                                      "--prtemca",
                                      "plm_ssh_args",
                                      "-o BatchMode=yes -o StrictHostKeyChecking=accept-new -F "
                                      "/t/ssh_config -o UserKnownHostsFile=/t/known_hosts -p 2222",
                                      "--mca",
                                      "btl_tcp_if_include",
                                      "127.0.0.0/8",
                                      "-x",
                                      "PATH",
                                      "--wdir",
                                      "/shared",
                                      "./train"});
  // Across machines no btl (Open MPI 5 has no openib to leave out); other networks reach PRRTE's
  // own TCP too, loopback never (it refuses 127.0.0.0/8).
  in.host_addresses = {"10.0.0.1", "127.0.0.1"};
  Args argv = mpirun_argv(plan, in);
  CHECK(mca_values(argv, "btl").empty());
  auto after = [&](const std::string& word) {
    auto it = std::find(argv.begin(), argv.end(), word);
    return it == argv.end() || it + 1 == argv.end() ? std::string("(absent)") : *(it + 1);
  };
  CHECK(after("prte_if_include") == "10.0.0.1/31");
  CHECK(*(std::find(argv.begin(), argv.end(), "prte_if_include") - 1) == "--prtemca");
  // One machine twice: the shared-memory BTL is sm; no ORTE session-directory work-arounds.
  in.same_machine = true;
  in.daemons_share_machine = true;
  in.shim = "/usr/bin/hvdrun";
  in.session_dir_base = "/tmp/hvdrun-mpi.abc";
  argv = mpirun_argv(plan, in);
  CHECK(mca_values(argv, "btl") == Args{"^sm,ofi"});
  CHECK(mca_values(argv, "coll") == Args{"^han"});  // han hangs across one machine's "hosts"
  CHECK(after("rtc_hwloc_vmhole") == "(absent)");
  CHECK(after("orte_launch_agent") == "(absent)");
  CHECK(after("prte_launch_agent") == "(absent)");
  // The user's --prtemca wins as -mca does, and the SSH options stay hvdrun's under either name.
  in.extra_args = {"--prtemca", "plm_ssh_no_tree_spawn", "0"};
  argv = mpirun_argv(plan, in);
  CHECK(std::count(argv.begin(), argv.end(), "plm_ssh_no_tree_spawn") == 1);
  in.extra_args = {"--prtemca", "plm_ssh_args", "-o StrictHostKeyChecking=no"};
  require_usage_error([&] { mpirun_argv(plan, in); }, "--mpi-args sets plm_ssh_args");
  // Inside Slurm: PRRTE's Slurm launcher.
  in.extra_args.clear();
  in.through_slurm = true;
  argv = mpirun_argv(plan, in);
  CHECK(after("plm") == "slurm");
  CHECK(*(std::find(argv.begin(), argv.end(), "plm") - 1) == "--prtemca");
  CHECK(mca_values(argv, "btl") == Args{"self,tcp"});
}

TEST_CASE("mpirun argv: libfabric's transport is left out when every rank is on this machine",
          "[mpi]") {
  MpiCommandInput in = input();
  in.host_addresses.clear();
  CHECK(mca_values(mpirun_argv(plan_for("localhost:2", {"x"}), in), "btl") == Args{"^openib,ofi"});
  // Across machines it may be the fabric: horovodrun's choice stays.
  CHECK(mca_values(mpirun_argv(plan_for("a:1,b:1", {"x"}), input()), "btl") == Args{"^openib"});
}

TEST_CASE("mpirun argv: an MCA parameter in --mpi-args replaces hvdrun's own", "[mpi]") {
  MpiCommandInput in = input();
  in.extra_args = {"-mca", "btl",  "self,vader",       "--mca", "pml",
                   "ucx",  "-mca", "btl_base_verbose", "1"};
  const Args argv = mpirun_argv(plan_for("a:1,b:1", {"x"}), in);
  CHECK(mca_values(argv, "btl") == Args{"self,vader"});  // once: mpirun refuses it twice
  CHECK(mca_values(argv, "pml") == Args{"ucx"});
  CHECK(mca_values(argv, "btl_tcp_if_include") == Args{"127.0.0.0/8"});  // the rest stays
  CHECK(mca_values(argv, "plm_rsh_args").size() == 1);

  // Not the SSH options, which carry the host-key policy.
  in.extra_args = {"-mca", "plm_rsh_args", "-o StrictHostKeyChecking=no"};
  require_usage_error([&] { mpirun_argv(plan_for("a:1,b:1", {"x"}), in); },
                      "--mpi-args sets plm_rsh_args");
}

TEST_CASE("mpirun argv: daemons on one machine do not share the hwloc topology file", "[mpi]") {
  MpiCommandInput in = input();
  in.host_addresses = {"127.0.0.2", "127.0.0.3"};
  auto vmhole = [](const Args& argv) {
    for (size_t i = 0; i + 2 < argv.size(); ++i) {
      if (argv[i] == "-mca" && argv[i + 1] == "rtc_hwloc_vmhole") return argv[i + 2];
    }
    return std::string("(absent)");
  };
  const Plan plan = plan_for("a:1,b:1", {"x"});
  CHECK(vmhole(mpirun_argv(plan, in)) == "(absent)");  // hosts that are separate machines
  in.daemons_share_machine = true;
  in.shim = "/usr/bin/hvdrun";
  in.session_dir_base = "/tmp/hvdrun-mpi.abc";
  const Args argv = mpirun_argv(plan, in);
  CHECK(vmhole(argv) == "none");
  auto it = std::find(argv.begin(), argv.end(), "orte_launch_agent");
  REQUIRE(it != argv.end());  // each daemon gets a session directory of its own
  CHECK(*(it + 1) == "/usr/bin/hvdrun --orted-shim /tmp/hvdrun-mpi.abc orted");
}

TEST_CASE("mpirun argv: inside Slurm, daemons through Slurm and no SSH options", "[mpi]") {
  MpiCommandInput in = input();
  in.through_slurm = true;
  in.host_addresses = {"127.0.1.1", "127.0.1.2"};
  auto after = [](const Args& argv, const std::string& flag) {
    auto it = std::find(argv.begin(), argv.end(), flag);
    return it == argv.end() || it + 1 == argv.end() ? std::string() : *(it + 1);
  };
  // Differing ports would be a usage error over SSH; through Slurm they are not used at all.
  const Plan plan = plan_for("n1 slots=2 port=22\nn2 slots=2 port=2200\n", {"x"});
  Args argv = mpirun_argv(plan, in);
  CHECK(after(argv, "plm") == "slurm");
  CHECK(after(argv, "btl") == "^openib");
  CHECK(after(argv, "btl_tcp_if_include") == "127.0.0.0/8");
  CHECK(after(argv, "-H") == "n1:2,n2:2");
  for (const std::string& word : argv) {
    CHECK(word.find("plm_rsh") == std::string::npos);
    CHECK(word.find("BatchMode") == std::string::npos);
  }
  in.same_machine = true;  // nodes that are one machine: TCP only, vader would crash
  argv = mpirun_argv(plan, in);
  CHECK(after(argv, "btl") == "self,tcp");
  in.placeholders = true;
  CHECK_THAT(after(mpirun_argv(plan, in), "btl"),
             Catch::Matchers::ContainsSubstring("self,tcp when two nodes are one machine"));
}

TEST_CASE("mpirun argv: --rsh-agent, daemons through the shim and no SSH options", "[mpi]") {
  MpiCommandInput in = input();
  in.shim = "/opt/hvd/bin/hvdrun";
  in.rsh_agent = "kubectl exec -i {host} --";
  auto after = [](const Args& argv, const std::string& flag) {
    auto it = std::find(argv.begin(), argv.end(), flag);
    return it == argv.end() || it + 1 == argv.end() ? std::string() : *(it + 1);
  };
  // Per-host ports do not matter: no SSH.
  const Plan plan = plan_for("pod-a slots=1 port=22\npod-b slots=1 port=2200\n", {"x"});
  const Args argv = mpirun_argv(plan, in);
  CHECK(after(argv, "plm_rsh_agent") == "/opt/hvd/bin/hvdrun --rsh-agent-shim");
  CHECK(after(argv, "plm_rsh_no_tree_spawn") == "1");
  for (const std::string& word : argv) {
    CHECK(word.find("plm_rsh_args") == std::string::npos);
    CHECK(word.find("BatchMode") == std::string::npos);
  }
  // The template travels in mpirun's environment, never on its command line.
  for (const std::string& word : argv) CHECK(word.find("kubectl") == std::string::npos);
  in.shim = "/opt/my hvd/hvdrun";
  CHECK_THROWS_AS(mpirun_argv(plan, in), hvd::UsageError);
}

TEST_CASE("mpirun argv: hostile command words stay separate words", "[mpi]") {
  const Args command{"./train", "a b", "it's", "$HOME", "line\nbreak", "--x=\"y\""};
  const Args argv = mpirun_argv(plan_for("a:1", command), input());
  CHECK(Args(argv.end() - 6, argv.end()) == command);
}

TEST_CASE("mpirun argv: what mpirun cannot express is a usage error", "[mpi]") {
  require_usage_error(
      [] { mpirun_argv(plan_for("a slots=1 port=22\nb slots=1 port=2200\n", {"x"}), input()); },
      "different SSH ports", "native mode");
  require_usage_error([] { mpirun_argv(plan_for("u@a:1,v@b:1", {"x"}), input()); },
                      "different SSH users");
  MpiCommandInput spaced = input();
  spaced.ssh.config_file = "/my configs/ssh_config";
  require_usage_error([&] { mpirun_argv(plan_for("a:1", {"x"}), spaced); },
                      "--ssh-config /my configs/ssh_config contains a space");
}

TEST_CASE("mpirun output: tagged lines and the failed rank", "[mpi]") {
  const auto line = parse_tagged_line("[1,3]<stderr>:oops: [1,2] inside");
  REQUIRE(line.has_value());
  CHECK(line->rank == 3);
  CHECK(line->is_stderr);
  CHECK(line->text == "oops: [1,2] inside");
  CHECK(parse_tagged_line("[1,0]<stdout>:")->text.empty());
  CHECK_FALSE(parse_tagged_line("mpirun detected that one or more processes exited").has_value());
  CHECK(failed_rank_from_mpirun("The first process to do so was:\n\n  Process name: "
                                "[[20648,1],2]\n  Exit code:    3\n") == 2);
  CHECK_FALSE(failed_rank_from_mpirun("nothing here").has_value());
  // As mpirun printed it in a CI run, without the "Process name" part.
  CHECK(mpirun_reports_rank_failure(
      "Primary job  terminated normally, but 1 process returned\na non-zero exit code. Per "
      "user-direction, the job has been aborted."));
  CHECK_FALSE(mpirun_reports_rank_failure("mpirun was unable to find the specified executable"));
}

TEST_CASE("mpirun output: Open MPI 5's tags end with a space, its messages name the rank",
          "[mpi]") {
  // As Open MPI 5.0.7's mpirun wrote them (od -c): "[1,0]<stdout>: hi 0".
  using hvd::launcher::TagEnd;
  const auto line = parse_tagged_line("[1,1]<stderr>:  indented", 4, TagEnd::kColonSpace);
  REQUIRE(line.has_value());
  CHECK(line->rank == 1);
  CHECK(line->text == " indented");  // the rank's own space stays
  CHECK_FALSE(parse_tagged_line("[1,1]<stderr>:x", 4, TagEnd::kColonSpace).has_value());
  // Split across reads at every byte, and a tag inside a line.
  const std::string bytes = "[1,0]<stdout>: a[1,0]<stdout>: b\n[1,2]<stderr>: c\nprterun: own\n";
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    std::map<int, std::string> out, err;
    std::vector<std::string> own;
    hvd::launcher::TagSplitter splitter{
        [&](int rank, bool is_stderr, std::string_view b) { (is_stderr ? err : out)[rank] += b; },
        [&](std::string_view l, bool) { own.emplace_back(l); }, 4, TagEnd::kColonSpace};
    splitter.feed(bytes.substr(0, cut));
    splitter.feed(bytes.substr(cut));
    splitter.finish();
    INFO("cut at " << cut);
    CHECK(out[0] == "ab\n");
    CHECK(err[2] == "c\n");
    CHECK(own == std::vector<std::string>{"prterun: own"});
  }
  CHECK(failed_rank_from_mpirun("The first process to do so was:\n\n   Process name: "
                                "[prterun-vm-72@1,1]\n   Exit code:    3\n") == 1);
  CHECK(mpirun_reports_rank_failure(
      "prterun detected that one or more processes exited with non-zero status,\nthus causing "
      "the job to be terminated. The first process to do so was:"));
  CHECK(mpirun_aborts_job("prterun noticed that process rank 1 with PID 232 on node vm exited on"));
}

TEST_CASE("mpirun's tagged output: a tag inside a line starts a piece, not text", "[mpi]") {
  // mpirun tags every piece it read from a rank, not every line (seen with PyTorch under --mpi:
  // an unbuffered Python traceback line written in pieces).
  Split split;
  auto& [out, err, own, splitter, forged] = split;
  splitter.feed("[1,1]<stderr>:    [1,1]<stderr>:raise ValueError(\"x\")[1,1]<stderr>:\n");
  splitter.feed("[1,1]<stderr>:ValueError[1,1]<stderr>:: [1,1]<stderr>:x[1,1]<stderr>:\n");
  CHECK(err[1] == "    raise ValueError(\"x\")\nValueError: x\n");
  // Another rank's piece between two pieces of a line; each rank keeps its own bytes.
  splitter.feed("[1,0]<stdout>:step 1 of [1,2]<stdout>:rank 2 here\n[1,0]<stdout>:9\n");
  CHECK(out[0] == "step 1 of 9\n");
  CHECK(out[2] == "rank 2 here\n");
  // A tag cut by the end of a read, anywhere; text with brackets that is no tag stays text.
  const std::string line = "[1,3]<stdout>:a[1,3]<stdout>:b [1,2] [x] [1,3]<std c[\n";
  for (size_t cut = 1; cut < line.size(); ++cut) {
    out[3].clear();
    splitter.feed(line.substr(0, cut));
    CHECK(splitter.buffered() <= hvd::launcher::TagSplitter::kMaxTag);
    splitter.feed(line.substr(cut));
    INFO("cut at " << cut);
    CHECK(out[3] == "ab [1,2] [x] [1,3]<std c[\n");
  }
  // A possible tag at the very end of the stream is text.
  splitter.feed("[1,3]<stdout>:end [1,");
  splitter.finish();
  CHECK(out[3].ends_with("end [1,"));
  CHECK(own.empty());
}

TEST_CASE("mpirun's tagged output: lines of any length pass through with bounded memory", "[mpi]") {
  Split split;
  auto& [out, err, own, splitter, forged] = split;
  // Tags split across reads, an own line between, an empty own line.
  for (std::string_view piece :
       {"[1,0]<std", "out>:hel", "lo\nmpirun says hi\n", "\n[1,3]<", "stderr>:oops\n"}) {
    splitter.feed(piece);
  }
  CHECK(out[0] == "hello\n");
  CHECK(err[3] == "oops\n");
  REQUIRE(own.size() == 2);
  CHECK(own[0] == "mpirun says hi");
  CHECK(own[1].empty());

  // 64 MiB in one line without a newline, fed in 64 KiB reads: delivered as it comes, while the
  // splitter itself holds no more than a tag's worth.
  const std::string chunk(64 << 10, 'x');
  splitter.feed("[1,1]<stdout>:");
  size_t most = 0;
  for (int i = 0; i < 1024; ++i) {
    splitter.feed(chunk);
    most = std::max(most, splitter.buffered());
  }
  splitter.feed("\n");
  CHECK(out[1].size() == (64u << 20) + 1);
  CHECK(most <= hvd::launcher::TagSplitter::kMaxTag);

  // mpirun's own endless line is cut at kMaxOwnLine.
  for (int i = 0; i < 64; ++i) splitter.feed(chunk);
  CHECK(splitter.buffered() <= hvd::launcher::TagSplitter::kMaxOwnLine);
  splitter.feed("\n");
  REQUIRE(own.size() == 3);
  CHECK(own[2].size() <= hvd::launcher::TagSplitter::kMaxOwnLine + 8);
  CHECK(own[2].ends_with(" [...]"));
}

TEST_CASE("mpirun argv: an IPv6 host is a usage error, IPv6 interface addresses are /128",
          "[mpi]") {
  PlanRequest r;
  r.hosts = parse_host_list("[fd00::2]:1,10.0.0.3:1");
  r.default_user = "root";
  r.command = {"./train"};
  const Plan plan = make_plan(r, LocalIdentity{"box", {"127.0.0.1"}}, {});
  require_usage_error([&] { mpirun_argv(plan, MpiCommandInput{}); },
                      "mpirun cannot take the IPv6 address [fd00::2] as a host", "without --mpi");
  CHECK(tcp_include({"10.0.0.1", "fd00::1", "127.0.0.2"}) == "10.0.0.1/31,fd00::1/128,127.0.0.0/8");
}
