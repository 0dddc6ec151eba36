// Where the hosts come from when the command line names none: the allocation a scheduler gave
// the job (Slurm, PBS/Torque, LSF) or the hostfile an operator set for Open MPI (the Kubeflow MPI
// Operator sets OMPI_MCA_orte_default_hostfile). -H and --hostfile always win; with none of
// these, localhost as before.
//
// Pure: the environment comes through a getter and files through a reader, so every grammar and
// every source is unit-tested without a scheduler. Errors are UsageErrors naming the variable or
// file and the offending part.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/plan/host_spec.h"

namespace hvd::launcher {

// Where a launch's hosts came from, for the dry run ("hosts_source" in JSON) and messages.
struct HostsSource {
  std::string kind;  // "host_list", "hostfile", "slurm", "pbs", "lsf", "openmpi", "localhost"
  std::string description;               // "the Slurm allocation 1234: 3 nodes, 6 tasks"
  std::vector<HostSpec> hosts;           // empty for "localhost" (the plan's default host)
  std::optional<int> default_np;         // the scheduler's task count (SLURM_NTASKS)
  std::optional<std::string> slurm_job;  // SLURM_JOB_ID, when the hosts are Slurm's
  std::string discovery_output{};        // "discovery": what the script printed
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The file's contents, or nullopt when it cannot be read.
using FileLookup = std::function<std::optional<std::string>(const std::string& path)>;

// Slurm's hostlist syntax: "n[01-04,07],gpu-[1-2],login": comma-separated entries, each with any
// number of bracket groups of numbers and ranges (zero padding kept: "01-04" is 01 02 03 04).
// `what` names the input in messages (e.g. "SLURM_JOB_NODELIST"). Throws UsageError.
std::vector<std::string> expand_slurm_hostlist(std::string_view text, std::string_view what);

// Slurm's per-node counts, "2(x3),1": a count, optionally repeated "(xN)" times; the result has
// `nodes` entries (a mismatch is an error). Throws UsageError.
std::vector<int> expand_slurm_counts(std::string_view text, std::size_t nodes,
                                     std::string_view what);

// One host name per line per slot (PBS_NODEFILE, LSB_DJOB_HOSTFILE): hosts in order of first
// appearance, slots counted. Blank lines are skipped. Throws UsageError for an empty list.
std::vector<HostSpec> hosts_from_slot_lines(std::string_view text, std::string_view what);

// LSB_MCPU_HOSTS: "host1 n1 host2 n2 ...". Throws UsageError.
std::vector<HostSpec> hosts_from_lsb_mcpu(std::string_view text);

// The hosts for this launch. `host_list`/`hostfile` are -H and --hostfile as given.
HostsSource choose_hosts(const std::optional<std::string>& host_list,
                         const std::optional<std::string>& hostfile, const EnvLookup& env,
                         const FileLookup& read_file);

// The real environment and file system.
std::optional<std::string> getenv_value(const std::string& name);
std::optional<std::string> read_whole_file(const std::string& path);

}  // namespace hvd::launcher
