// Hosts from a scheduler's allocation or an operator's hostfile (launcher/plan/scheduler_hosts.h):
// Slurm's hostlist and per-node count grammars, PBS/Torque, LSF and Open MPI's default hostfile,
// and which source wins. Pure: the environment and the files are maps.
#include <map>
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "common/error.h"
#include "launcher/plan/scheduler_hosts.h"

using Catch::Matchers::ContainsSubstring;
using hvd::launcher::choose_hosts;
using hvd::launcher::expand_slurm_counts;
using hvd::launcher::expand_slurm_hostlist;
using hvd::launcher::HostsSource;
using Names = std::vector<std::string>;

namespace {

struct World {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;

  HostsSource choose(std::optional<std::string> h = {}, std::optional<std::string> f = {}) const {
    return choose_hosts(
        h, f,
        [&](const std::string& n) -> std::optional<std::string> {
          auto it = env.find(n);
          return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
        },
        [&](const std::string& p) -> std::optional<std::string> {
          auto it = files.find(p);
          return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
        });
  }
};

std::string usage_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const hvd::UsageError& e) {
    return e.what();
  }
  return "no error";
}

std::vector<std::pair<std::string, int>> slots_of(const HostsSource& s) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& h : s.hosts) out.emplace_back(h.host, h.slots);
  return out;
}

}  // namespace

TEST_CASE("slurm hostlist: ranges, padding, lists, several groups", "[scheduler]") {
  CHECK(expand_slurm_hostlist("n1", "X") == Names{"n1"});
  CHECK(expand_slurm_hostlist("n[1-3]", "X") == Names{"n1", "n2", "n3"});
  CHECK(expand_slurm_hostlist("n[01-04,07]", "X") == Names{"n01", "n02", "n03", "n04", "n07"});
  CHECK(expand_slurm_hostlist("n[8-11]", "X") == Names{"n8", "n9", "n10", "n11"});
  CHECK(expand_slurm_hostlist("n[098-101]", "X") == Names{"n098", "n099", "n100", "n101"});
  CHECK(expand_slurm_hostlist("n[01-02],gpu-[1-2],login", "X") ==
        Names{"n01", "n02", "gpu-1", "gpu-2", "login"});
  CHECK(expand_slurm_hostlist("rack[1-2]-n[01-02]", "X") ==
        Names{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"});
  CHECK(expand_slurm_hostlist("[1-2]x", "X") == Names{"1x", "2x"});
  CHECK(expand_slurm_hostlist(" a.example.org , b ", "X") == Names{"a.example.org", "b"});
}

TEST_CASE("slurm hostlist: malformed lists name the variable and the part", "[scheduler]") {
  const auto err = [](const char* text) {
    return usage_error([&] { expand_slurm_hostlist(text, "SLURM_JOB_NODELIST"); });
  };
  CHECK_THAT(err("n[1-3"),
             ContainsSubstring("SLURM_JOB_NODELIST='n[1-3'") && ContainsSubstring("without ']'"));
  CHECK_THAT(err("n1-3]"), ContainsSubstring("without '['"));
  CHECK_THAT(err("n[3-1]"), ContainsSubstring("goes down") && ContainsSubstring("'3-1'"));
  CHECK_THAT(err("n[a-b]"), ContainsSubstring("not a number") && ContainsSubstring("'a-b'"));
  CHECK_THAT(err("n[1,,2]"), ContainsSubstring("not a number"));
  CHECK_THAT(err("n[[1]]"), ContainsSubstring("nested"));
  CHECK_THAT(err("a,,b"), ContainsSubstring("empty entry"));
  CHECK_THAT(err(""), ContainsSubstring("no host"));
  CHECK_THAT(err("n[1-100000000]"), ContainsSubstring("more than 100000 hosts"));
  CHECK_THAT(err("a[1-400]b[1-400]"), ContainsSubstring("more than 100000 hosts"));
}

TEST_CASE("slurm counts: N(xM) repeats and the node count must match", "[scheduler]") {
  CHECK(expand_slurm_counts("2(x3),1", 4, "X") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_slurm_counts("4", 1, "X") == std::vector<int>{4});
  CHECK(expand_slurm_counts("1,2,3", 3, "X") == std::vector<int>{1, 2, 3});
  const auto err = [](const char* text, std::size_t nodes) {
    return usage_error([&] { expand_slurm_counts(text, nodes, "SLURM_TASKS_PER_NODE"); });
  };
  CHECK_THAT(err("2(x3)", 2), ContainsSubstring("more than the 2 nodes"));
  CHECK_THAT(err("2", 3), ContainsSubstring("counts for 1 of the 3 nodes"));
  CHECK_THAT(err("2(3)", 1), ContainsSubstring("(xN)") && ContainsSubstring("'2(3)'"));
  CHECK_THAT(err("0", 1), ContainsSubstring("not a count"));
  CHECK_THAT(err("x,1", 2), ContainsSubstring("'x'"));
  CHECK_THAT(err("2(x0)", 1), ContainsSubstring("(xN)"));
}

TEST_CASE("hosts source: the Slurm allocation, with -np from SLURM_NTASKS", "[scheduler]") {
  World w;
  w.env = {{"SLURM_JOB_ID", "1234"},
           {"SLURM_JOB_NODELIST", "n[1-3]"},
           {"SLURM_TASKS_PER_NODE", "2(x3)"},
           {"SLURM_NTASKS", "6"}};
  const HostsSource s = w.choose();
  CHECK(s.kind == "slurm");
  CHECK(slots_of(s) == std::vector<std::pair<std::string, int>>{{"n1", 2}, {"n2", 2}, {"n3", 2}});
  CHECK(s.default_np == 6);
  CHECK(s.slurm_job == "1234");
  CHECK(s.description == "the Slurm allocation 1234: 3 nodes, 6 tasks");
  CHECK(s.hosts[1].origin == "SLURM_JOB_NODELIST entry 2");
  // Without per-node counts: one slot a node.
  w.env.erase("SLURM_TASKS_PER_NODE");
  w.env.erase("SLURM_NTASKS");
  CHECK(slots_of(w.choose())[2] == std::pair<std::string, int>{"n3", 1});
  CHECK_FALSE(w.choose().default_np);
}

TEST_CASE("hosts source: -H and --hostfile win over any allocation", "[scheduler]") {
  World w;
  w.env = {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n1"}, {"PBS_NODEFILE", "/nodes"}};
  w.files["/tmp/hosts"] = "a slots=2\n";
  CHECK(w.choose("x:3").kind == "host_list");
  CHECK(slots_of(w.choose("x:3")) == std::vector<std::pair<std::string, int>>{{"x", 3}});
  // read_hostfile reads the real file system: a missing one is its own usage error.
  CHECK_THAT(usage_error([&] { w.choose(std::nullopt, "/nonexistent/hosts"); }),
             ContainsSubstring("/nonexistent/hosts"));
}

TEST_CASE("hosts source: a broken Slurm environment is a clear error", "[scheduler]") {
  World w;
  w.env = {{"SLURM_JOB_ID", "77"}};
  CHECK_THAT(usage_error([&] { w.choose(); }),
             ContainsSubstring("SLURM_JOB_ID=77 is set, but SLURM_JOB_NODELIST is not"));
  w.env["SLURM_JOB_NODELIST"] = "n[1-2]";
  w.env["SLURM_TASKS_PER_NODE"] = "2(x3)";
  CHECK_THAT(usage_error([&] { w.choose(); }), ContainsSubstring("SLURM_TASKS_PER_NODE='2(x3)'"));
  w.env["SLURM_TASKS_PER_NODE"] = "1(x2)";
  w.env["SLURM_NTASKS"] = "many";
  CHECK_THAT(usage_error([&] { w.choose(); }), ContainsSubstring("SLURM_NTASKS='many'"));
  // An empty SLURM_JOB_ID is no allocation.
  World empty;
  empty.env = {{"SLURM_JOB_ID", ""}};
  CHECK(empty.choose().kind == "localhost");
}

TEST_CASE("hosts source: PBS and Torque's node file, one line per slot", "[scheduler]") {
  World w;
  w.env = {{"PBS_NODEFILE", "/var/spool/pbs/aux/42"}, {"PBS_JOBID", "42.server"}};
  w.files["/var/spool/pbs/aux/42"] = "c1\nc1\nc2\n\nc1\nc3\n";
  const HostsSource s = w.choose();
  CHECK(s.kind == "pbs");
  CHECK(slots_of(s) == std::vector<std::pair<std::string, int>>{{"c1", 3}, {"c2", 1}, {"c3", 1}});
  CHECK(s.description == "the PBS allocation 42.server: 3 nodes, 5 slots (PBS_NODEFILE)");
  w.files["/var/spool/pbs/aux/42"] = "c1 c2\n";
  CHECK_THAT(usage_error([&] { w.choose(); }), ContainsSubstring("/var/spool/pbs/aux/42:1"));
  w.files["/var/spool/pbs/aux/42"] = "\n\n";
  CHECK_THAT(usage_error([&] { w.choose(); }), ContainsSubstring("no host"));
  w.files.clear();
  CHECK_THAT(usage_error([&] { w.choose(); }),
             ContainsSubstring("PBS_NODEFILE=/var/spool/pbs/aux/42: no such readable file"));
}

TEST_CASE("hosts source: LSF's LSB_MCPU_HOSTS and LSB_DJOB_HOSTFILE", "[scheduler]") {
  World w;
  w.env = {{"LSB_MCPU_HOSTS", "h1 4 h2 2"}, {"LSB_JOBID", "9"}};
  HostsSource s = w.choose();
  CHECK(s.kind == "lsf");
  CHECK(slots_of(s) == std::vector<std::pair<std::string, int>>{{"h1", 4}, {"h2", 2}});
  CHECK(s.description == "the LSF allocation 9: 2 hosts, 6 slots (LSB_MCPU_HOSTS)");
  w.env["LSB_MCPU_HOSTS"] = "h1 4 h2";
  CHECK_THAT(usage_error([&] { w.choose(); }), ContainsSubstring("not pairs"));
  w.env["LSB_MCPU_HOSTS"] = "h1 four";
  CHECK_THAT(usage_error([&] { w.choose(); }),
             ContainsSubstring("'four' is not a slot count for h1"));
  w.env = {{"LSB_DJOB_HOSTFILE", "/tmp/lsf.hosts"}};
  w.files["/tmp/lsf.hosts"] = "h1\nh1\nh2\n";
  s = w.choose();
  CHECK(slots_of(s) == std::vector<std::pair<std::string, int>>{{"h1", 2}, {"h2", 1}});
  CHECK_THAT(s.description, ContainsSubstring("(LSB_DJOB_HOSTFILE)"));
}

TEST_CASE("hosts source: Open MPI's default hostfile (the Kubeflow MPI Operator's)",
          "[scheduler]") {
  World w;
  w.env = {{"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"}};
  w.files["/etc/mpi/hostfile"] =
      "job-worker-0.job-worker slots=2\njob-worker-1.job-worker slots=2\n";
  const HostsSource s = w.choose();
  CHECK(s.kind == "openmpi");
  CHECK(slots_of(s) == std::vector<std::pair<std::string, int>>{{"job-worker-0.job-worker", 2},
                                                                {"job-worker-1.job-worker", 2}});
  CHECK_THAT(s.description, ContainsSubstring("/etc/mpi/hostfile"));
  w.files["/etc/mpi/hostfile"] = "a slots=x\n";
  CHECK_THAT(usage_error([&] { w.choose(); }), ContainsSubstring("/etc/mpi/hostfile:1"));
}

TEST_CASE("hosts source: nothing set is localhost", "[scheduler]") {
  const HostsSource s = World{}.choose();
  CHECK(s.kind == "localhost");
  CHECK(s.hosts.empty());
  CHECK_FALSE(s.default_np);
}
