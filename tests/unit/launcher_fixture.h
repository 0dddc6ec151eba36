// What the launcher's unit tests share: a plan on a host list, made on a machine called "box"
// (127.0.0.1), and launch options with hvdrun installed under /opt/hvd.
#pragma once

#include <string>

#include "launcher/core/launcher.h"
#include "launcher/plan/plan.h"

namespace hvd::test {

// `hosts` in -H's syntax, with the command ./train, user "me" and job id "j"; `origin`, when
// given, is the kind of source they came from ("slurm": the agent launch's choice reads it).
inline launcher::Plan plan_on(const std::string& hosts, const std::string& origin = "") {
  launcher::PlanRequest r;
  r.hosts = launcher::parse_host_list(hosts);
  if (!origin.empty()) r.hosts_origin = {origin, ""};
  r.default_user = "me";
  r.command = {"./train"};
  r.job_id = "j";
  return launcher::make_plan(r, launcher::LocalIdentity{"box", {"127.0.0.1"}}, {{"PATH", "/bin"}});
}

inline launcher::LaunchOptions launch_options() {
  launcher::LaunchOptions o;
  o.cwd = "/work";
  o.hvdrun_path = "/opt/hvd/bin/hvdrun";
  o.ssh.agent_path = "/opt/hvd/bin/hvdrun";
  return o;
}

}  // namespace hvd::test
