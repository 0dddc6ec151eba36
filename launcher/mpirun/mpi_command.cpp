#include "launcher/mpirun/mpi_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <regex>
#include <set>

#include "common/error.h"
#include "common/process.h"
#include "contract/env_table.h"
#include "launcher/mpirun/rank_shim.h"

namespace hvd::launcher {
namespace {

// horovodrun passes -mca plm_rsh_num_concurrent HOSTS from this many hosts on.
constexpr std::size_t kConcurrentSshFromHosts = 64;

bool has_space(std::string_view s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

// plm_rsh_args is split on spaces by Open MPI and handed to every daemon launch: keep the
// hermetic ssh options and hvdrun's host-key policy, and refuse what would split wrongly.
std::string rsh_args(const Plan& plan, const ssh::SshOptions& ssh) {
  std::vector<std::string> words{"-o", "BatchMode=yes", "-o",
                                 ssh.host_key_policy == ssh::HostKeyPolicy::kStrict
                                     ? "StrictHostKeyChecking=yes"
                                     : "StrictHostKeyChecking=accept-new"};
  auto path = [](const char* flag, const std::string& p) {
    if (has_space(p)) {
      throw UsageError(fmt::format("--mpi: {} {} contains a space, which mpirun's plm_rsh_args "
                                   "cannot carry",
                                   flag, p),
                       "use a path without spaces (a symlink will do)");
    }
    return p;
  };
  if (ssh.config_file) words.insert(words.end(), {"-F", path("--ssh-config", *ssh.config_file)});
  if (ssh.known_hosts_file) {
    words.insert(words.end(),
                 {"-o", "UserKnownHostsFile=" + path("--ssh-known-hosts", *ssh.known_hosts_file)});
  }
  if (ssh.identity_file) words.insert(words.end(), {"-i", path("-i", *ssh.identity_file)});
  // One port and one user for every host: that is all mpirun can say.
  std::optional<int> port;
  std::optional<std::string> user;
  for (const HostPlan& h : plan.hosts) {
    if (h.local) continue;
    if (port && *port != h.ssh_port) {
      throw UsageError("--mpi: the hosts use different SSH ports, which mpirun cannot express",
                       "use one port for every host, or native mode (without --mpi)");
    }
    if (user && *user != h.ssh_user) {
      throw UsageError("--mpi: the hosts use different SSH users, which mpirun cannot express",
                       "use one user for every host, or native mode (without --mpi)");
    }
    port = h.ssh_port;
    user = h.ssh_user;
  }
  if (port && (ssh.port || *port != kDefaultSshPort)) {
    words.insert(words.end(), {"-p", std::to_string(*port)});
  }
  if (user && std::any_of(plan.hosts.begin(), plan.hosts.end(),
                          [](const HostPlan& h) { return h.spec.user.has_value(); })) {
    words.insert(words.end(), {"-l", *user});
  }
  return fmt::format("{}", fmt::join(words, " "));
}

bool has_remote_host(const Plan& plan) {
  return std::any_of(plan.hosts.begin(), plan.hosts.end(),
                     [](const HostPlan& h) { return !h.local; });
}

// Which transports (BTLs) ob1 may use. Never openib (horovodrun's choice: its verbs stack is
// deprecated and warns). Between ranks that are all on this machine, nor ofi: Open MPI's
// libfabric transport carries nothing there (shared memory does), but its progress function
// polls libfabric (a non-blocking epoll_wait system call) at every turn of Open MPI's progress
// loop, which more than doubled a 4 KiB MPI_Allreduce on the development VM (bench/README.md,
// "Open MPI's libfabric transport on one machine"). Across machines it stays: it may be the
// fabric. Open MPI's shared-memory transport (vader) crashes across "hosts" that are one machine:
// there, TCP.
// Open MPI 5 has no openib to leave out.
std::string btl_choice(const Plan& plan, const MpiCommandInput& input) {
  const MpirunDialect& d = mpirun_dialect(input.mpi_major);
  const std::string openib = d.has_openib ? "openib," : "";
  const std::string shared =
      input.through_slurm ? "self,tcp" : fmt::format("^{}{},ofi", openib, d.shared_memory);
  const std::string across = d.has_openib ? "^openib" : "";  // empty: Open MPI's own choice
  if (input.placeholders && has_remote_host(plan)) {
    return fmt::format("<set at launch: {}{} when two {} are one machine>",
                       across.empty() ? "" : across + ", or ", shared,
                       input.through_slurm ? "nodes" : "hosts");
  }
  if (input.same_machine) return shared;
  return has_remote_host(plan) ? across : fmt::format("^{}ofi", openib);
}

// PRRTE's own TCP (prte_if_include) leaves loopback interfaces out whatever it is told ("Did not
// find interface matching this subnet" for 127.0.0.0/8) and finds this machine's daemons over
// them by itself: only the other networks are passed; none left, the parameter goes.
std::string runtime_include(const std::string& include) {
  std::vector<std::string> kept;
  std::string_view rest = include;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (!item.starts_with("127.") && item != "lo" && item != "::1/128") kept.emplace_back(item);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return fmt::format("{}", fmt::join(kept, ","));
}

// The MCA parameters the user's --mpi-args set (`-mca NAME VALUE`, `--mca NAME VALUE`, and Open
// MPI 5's `--prtemca NAME VALUE`, `--pmixmca NAME VALUE`).
std::set<std::string, std::less<>> user_mca_names(const std::vector<std::string>& extra) {
  std::set<std::string, std::less<>> names;
  for (std::size_t i = 0; i + 1 < extra.size(); ++i) {
    if (extra[i] == "-mca" || extra[i] == "--mca" || extra[i] == "--prtemca" ||
        extra[i] == "--pmixmca") {
      names.insert(extra[i + 1]);
    }
  }
  return names;
}

}  // namespace

const MpirunDialect& mpirun_dialect(int major) {
  static const MpirunDialect kOpenMpi4{
      4,    "-mca",     "-mca",    "plm_rsh", "orte_launch_agent", "oob_tcp_if_include", "vader",
      true, "-bind-to", "-map-by", "-wd",     TagEnd::kColon};
  static const MpirunDialect kOpenMpi5{
      5,     "--prtemca", "--mca",    "plm_ssh", "prte_launch_agent", "prte_if_include", "sm",
      false, "--bind-to", "--map-by", "--wdir",  TagEnd::kColonSpace};
  return major >= 5 ? kOpenMpi5 : kOpenMpi4;
}

MpiVersion parse_mpirun_version(std::string_view output) {
  static const std::regex kOpenMpi(R"(\(Open MPI\) ([0-9]+)\.([0-9]+)(\.[0-9]+)?)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(output.begin(), output.end(), m, kOpenMpi)) {
    const std::string first(output.substr(0, output.find('\n')));
    const bool mpich = output.find("HYDRA") != std::string_view::npos ||
                       output.find("MPICH") != std::string_view::npos;
    const bool intel = output.find("Intel") != std::string_view::npos;
    throw UsageError(
        fmt::format("--mpi needs Open MPI 4.x or 5.x, but mpirun is {}: \"{}\"",
                    mpich   ? "MPICH"
                    : intel ? "Intel MPI"
                            : "not Open MPI",
                    first),
        "install Open MPI (Debian: openmpi-bin) and put its mpirun first on PATH, or use "
        "native mode (without --mpi)");
  }
  MpiVersion v{"Open MPI", std::stoi(m[1].str()), std::stoi(m[2].str()),
               m[1].str() + "." + m[2].str() + m[3].str()};
  if (v.major != 4 && v.major != 5) {
    throw UsageError(
        fmt::format("--mpi supports Open MPI 4.x and 5.x; this mpirun is Open MPI {}", v.text),
        "install Open MPI 4 or 5 (Debian 12 and 13: openmpi-bin), or use native mode");
  }
  return v;
}

std::vector<std::string> forwarded_names(const Plan& plan) {
  std::vector<std::string> names;
  if (plan.ranks.empty()) return names;
  for (const EnvEntry& e : plan.ranks.front().env) {
    if (e.source == EnvSource::kInherited || e.source == EnvSource::kExplicit ||
        e.source == EnvSource::kKnob) {
      names.push_back(e.name);
    }
  }
  return names;
}

std::vector<std::pair<std::string, std::string>> shim_environment(const Plan& plan,
                                                                  const std::string& master_addr,
                                                                  const std::string& master_port) {
  std::vector<int> layout;
  std::vector<std::string> hosts;
  for (const HostPlan& h : plan.hosts) {
    layout.push_back(h.num_ranks);
    hosts.push_back(h.spec.host);
  }
  return {{std::string(contract::kRankLayout.name), format_rank_layout(layout)},
          {std::string(contract::kRankHosts.name), fmt::format("{}", fmt::join(hosts, ","))},
          {std::string(contract::kMasterAddr.name), master_addr},
          {std::string(contract::kMasterPort.name), master_port}};
}

// Each address as a /31, not a /32: Open MPI 4.1 computes a prefix's netmask as
// ((1 << prefix) - 1) << (32 - prefix) (opal_net_prefix2netmask), and with 32 the shift by 32
// yields the netmask 0.0.0.0: a /32 matched every interface, loopback too, a rank advertised
// 127.0.0.1 and its peer connected to itself (MPI_Init hung between two containers,
// tests/container/podman_job.sh). A /31 holds the address and its neighbour only.
std::string tcp_include(const std::vector<std::string>& addresses) {
  std::vector<std::string> cidrs;
  for (const std::string& a : addresses) {
    const std::string cidr = a.starts_with("127.")              ? "127.0.0.0/8"
                             : a.find(':') != std::string::npos ? a + "/128"
                                                                : a + "/31";
    if (std::find(cidrs.begin(), cidrs.end(), cidr) == cidrs.end()) cidrs.push_back(cidr);
  }
  return fmt::format("{}", fmt::join(cidrs, ","));
}

std::vector<std::string> mpirun_argv(const Plan& plan, const MpiCommandInput& input) {
  for (const HostPlan& h : plan.hosts) {
    if (h.spec.host.find(':') != std::string::npos) {
      // Open MPI 4's -H and hostfiles do not parse IPv6 addresses (bracketed or not).
      throw UsageError(fmt::format("--mpi: mpirun cannot take the IPv6 address {} as a host",
                                   format_host(h.spec.host)),
                       "name the host (a name that resolves to it, or an ssh_config alias), or "
                       "launch natively (without --mpi), which takes IPv6 addresses");
    }
  }
  const MpirunDialect& d = mpirun_dialect(input.mpi_major);
  std::vector<std::string> argv{input.mpirun};
  if (input.as_root) argv.emplace_back("--allow-run-as-root");
  std::vector<std::string> hosts;
  for (const HostPlan& h : plan.hosts) {
    hosts.push_back(fmt::format("{}:{}", h.spec.host, h.num_ranks));
  }
  argv.insert(argv.end(), {"-np", std::to_string(plan.ranks.size()), "-H",
                           fmt::format("{}", fmt::join(hosts, ","))});
  if (input.binding_args) {
    argv.insert(argv.end(), input.binding_args->begin(), input.binding_args->end());
  } else {
    argv.insert(argv.end(), {std::string(d.bind_to), "none", std::string(d.map_by), "slot"});
  }
  argv.emplace_back("--tag-output");
  // An MCA parameter set in --mpi-args wins over hvdrun's own (mpirun refuses one listed twice),
  // but for the SSH options: they carry hvdrun's host-key policy.
  const auto user_mca = user_mca_names(input.extra_args);
  const std::string plm(d.plm);
  for (const char* name : {"plm_rsh_args", "plm_ssh_args"}) {
    if (!input.through_slurm && user_mca.count(name) != 0) {
      throw UsageError(
          fmt::format("--mpi-args sets {}, which hvdrun builds from its own SSH options (the "
                      "host-key policy among them)",
                      name),
          "use --ssh-config, -i, --ssh-known-hosts, -p or --ssh-host-key-policy instead");
    }
  }
  // A parameter of the MPI library (`mca`) or of the launch runtime (`rte`): one flag for both
  // under Open MPI 4, two under 5.
  auto param = [&](std::string_view flag, const std::string& name, std::string value) {
    if (user_mca.count(name) == 0 && !value.empty()) {
      argv.insert(argv.end(), {std::string(flag), name, std::move(value)});
    }
  };
  auto mca = [&](const std::string& name, std::string value) {
    param(d.mpi_flag, name, std::move(value));
  };
  auto rte = [&](const std::string& name, std::string value) {
    param(d.runtime_flag, name, std::move(value));
  };
  mca("pml", "ob1");
  mca("btl", btl_choice(plan, input));
  // Open MPI 5's hierarchical collectives (coll/han) split the world by node, and across "hosts"
  // that are one machine the first collective never ends on one rank (it spins; the other rank
  // finished): measured with 5.0.7 on two loopback hosts, whatever the BTLs. Without han the
  // tuned collectives run.
  if (input.same_machine && d.major >= 5) mca("coll", "^han");
  if (input.through_slurm) {
    // Open MPI's own Slurm launcher: its daemons start in a step of the allocation, no SSH.
    rte("plm", "slurm");
  } else if (input.rsh_agent) {
    // Open MPI splits plm_rsh_agent on spaces (and ':' separates alternatives).
    if (input.shim.find_first_of(" :") != std::string::npos) {
      throw UsageError(fmt::format("--mpi --rsh-agent: mpirun cannot take the agent path '{}' "
                                   "(a space or ':' in it)",
                                   input.shim),
                       "install hvdrun at a path without spaces or ':', or give it with "
                       "--agent-path");
    }
    rte(plm + "_no_tree_spawn", "1");
    rte(plm + "_agent", input.shim + " --rsh-agent-shim");
  } else {
    rte(plm + "_no_tree_spawn", "1");
    rte(plm + "_args", rsh_args(plan, input.ssh));
    // As horovodrun: from 64 hosts on, every daemon's ssh at once (Open MPI's default is 128
    // at a time, so it changes something only above 128 hosts).
    if (plan.hosts.size() >= kConcurrentSshFromHosts) {
      rte(plm + "_num_concurrent", std::to_string(plan.hosts.size()));
    }
  }
  // Open MPI 4's daemons on one machine share a session directory and an hwloc file
  // (MpiCommandInput); PRRTE's daemons each make their own, named by their pid.
  if (input.daemons_share_machine && d.major == 4) rte("rtc_hwloc_vmhole", "none");
  if (!input.session_dir_base.empty() && !input.shim.empty() && d.major == 4) {
    rte(std::string(d.launch_agent),
        input.shim + " --orted-shim " + input.session_dir_base + " orted");
  }
  // --network-cidr / --network-interface win: Open MPI takes CIDRs and interface names, and a
  // CIDR works across hosts whose NICs are named differently.
  const bool unknown = input.placeholders && has_remote_host(plan);
  if (plan.network.active() || !input.host_addresses.empty() || unknown) {
    const std::string include =
        plan.network.cidr       ? plan.network.cidr->text
        : plan.network.active() ? fmt::format("{}", fmt::join(plan.network.interfaces, ","))
        : unknown ? "<set at launch: 127.0.0.0/8 and each other address a host was reached at, "
                    "as /31>"
                  : tcp_include(input.host_addresses);
    mca("btl_tcp_if_include", include);
    rte(std::string(d.oob_include), d.major == 4 ? include : runtime_include(include));
  }
  for (const std::string& name : forwarded_names(plan)) argv.insert(argv.end(), {"-x", name});
  for (const auto& [name, value] : input.shim_env) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), {std::string(d.wdir), input.cwd});
  argv.insert(argv.end(), input.extra_args.begin(), input.extra_args.end());
  if (!input.shim.empty()) argv.insert(argv.end(), {input.shim, "--rank-shim", "--"});
  argv.insert(argv.end(), plan.command.begin(), plan.command.end());
  return argv;
}

namespace {

// `MPIRUN --version`, with our environment and PATH.
std::optional<CapturedRun> run_mpirun_version(const std::string& mpirun) {
  ProcessSpec spec;
  spec.argv = {mpirun, "--version"};
  spec.env = environ_strings();
  spec.lookup_in_our_path = true;
  return run_and_capture(spec);
}

}  // namespace

MpiVersion check_mpirun(const std::string& mpirun) {
  const auto run = run_mpirun_version(mpirun);
  if (!run || run->output.empty()) {
    throw UsageError(fmt::format("--mpi: cannot run '{} --version'", mpirun),
                     "install Open MPI (Debian: openmpi-bin), or use native mode");
  }
  return parse_mpirun_version(run->output);
}

int dry_run_mpi_major(const std::string& mpirun) {
  try {
    return check_mpirun(mpirun).major;
  } catch (const Error&) {
    return 4;
  }
}

std::optional<std::string> mpirun_version_line() {
  const auto run = run_mpirun_version("mpirun");
  if (!run || run->status.code() != 0) return std::nullopt;
  std::string first = run->output.substr(0, run->output.find('\n'));
  while (!first.empty() && first.back() == '\r') first.pop_back();
  if (first.empty()) return std::nullopt;
  return first;
}

}  // namespace hvd::launcher
