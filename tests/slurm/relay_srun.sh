#!/usr/bin/env bash
# Stands in for `srun` on PATH in seal_relay_check.sh (a link named srun to this script): hvdrun's
# agent step (HVD_AGENT_CONNECT in its environment) gets tests/slurm/seal_relay.py between its
# agents and hvdrun, by pointing the agents' connect-back address at the relay; anything else
# runs the real srun as it is. No hook in hvdrun: the address is what hvdrun gives the step.
#   HVDTEST_REAL_SRUN  the real srun
#   HVDTEST_RELAY_DIR  where the relay's capture, log, pid and the agent token land
#   HVDTEST_RELAY_MODE the relay's MODE (seal_relay.py; default record)
set -euo pipefail
: "${HVDTEST_REAL_SRUN:?}" "${HVDTEST_RELAY_DIR:?}"
if [[ -n ${HVD_AGENT_CONNECT:-} ]]; then
    dir=$HVDTEST_RELAY_DIR
    read -r _ port <<<"$HVD_AGENT_CONNECT"
    # What a recording relay must not find: the launch's own secret, for the check to look for.
    printf '%s' "${HVD_AGENT_TOKEN:-}" >"$dir/agent_token"
    setsid python3 "$(dirname "$(realpath "$0")")/seal_relay.py" "$port" "$dir/capture" \
        "${HVDTEST_RELAY_MODE:-record}" >"$dir/relay.port" 2>>"$dir/relay.log" </dev/null &
    echo $! >"$dir/relay.pid"
    for _ in $(seq 1 200); do
        [[ -s $dir/relay.port ]] && break
        sleep 0.05
    done
    relay_port=$(<"$dir/relay.port")
    export HVD_AGENT_CONNECT="127.0.0.1 $relay_port"
fi
exec "$HVDTEST_REAL_SRUN" "$@"
