// Host names from a scheduler get -H's checks (launcher/plan/scheduler_hosts.h), issue 51
// finding 15.
#include <functional>
#include <map>
#include <string>
#include "tests/support/catch.h"

#include "common/error.h"
#include "launcher/plan/scheduler_hosts.h"

using Catch::Matchers::ContainsSubstring;
using hvd::launcher::HostsSource;

namespace {

struct World {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;

  HostsSource choose() const {
    return hvd::launcher::choose_hosts(
        std::nullopt, std::nullopt,
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

}  // namespace

TEST_CASE("hosts source: a scheduler's host names get -H's checks, naming the source",
          "[scheduler]") {
  // Issue 51, finding 15: `-oProxyCommand=x` from PBS_NODEFILE reached mpirun's argv in the dry
  // run and a misleading internal error at launch.
  const std::string evil = "-oProxyCommand=x";
  World pbs;
  pbs.env = {{"PBS_NODEFILE", "/var/spool/pbs/aux/7"}};
  pbs.files = {{"/var/spool/pbs/aux/7", "n1\n" + evil + "\n"}};
  CHECK_THAT(usage_error([&] { pbs.choose(); }),
             ContainsSubstring("/var/spool/pbs/aux/7:2 (PBS_NODEFILE): host '" + evil +
                               "' starts with '-'"));
  World lsf;
  lsf.env = {{"LSB_MCPU_HOSTS", "n1 2 " + evil + " 2"}};
  CHECK_THAT(usage_error([&] { lsf.choose(); }),
             ContainsSubstring("LSB_MCPU_HOSTS entry 2: host '" + evil + "' starts with '-'"));
  World lsf_file;
  lsf_file.env = {{"LSB_DJOB_HOSTFILE", "/tmp/lsf_hosts"}};
  lsf_file.files = {{"/tmp/lsf_hosts", "n1\nn$(reboot)\n"}};
  CHECK_THAT(
      usage_error([&] { lsf_file.choose(); }),
      ContainsSubstring("/tmp/lsf_hosts:2 (LSB_DJOB_HOSTFILE): host 'n$(reboot)' contains '$'"));
  World slurm;
  slurm.env = {{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "n1," + evil}};
  CHECK_THAT(usage_error([&] { slurm.choose(); }),
             ContainsSubstring("SLURM_JOB_NODELIST entry 2: host '" + evil + "' starts with '-'"));
  // Names with '_' (docker-compose's) and addresses stay good.
  World fine;
  fine.env = {{"PBS_NODEFILE", "/f"}};
  fine.files = {{"/f", "proj_worker_1\n10.0.0.2\nfd00::3\n"}};
  CHECK(fine.choose().hosts.size() == 3);
}
