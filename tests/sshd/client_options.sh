# Sourced by the test-host scripts (tests/sshd/sshd_hosts.sh, tests/netns/netns_hosts.sh).
# client_options DIR PORT USER: the lines every `Host` block of their ssh_config shares: only
# files in DIR, never ~/.ssh, the agent or /etc/ssh; strict host keys; batch mode.
client_options() {
    local dir=$1 port=$2 user=$3
    cat <<EOF2
    Port $port
    User $user
    IdentityFile $dir/id_ed25519
    IdentitiesOnly yes
    IdentityAgent none
    UserKnownHostsFile $dir/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    UpdateHostKeys no
    CheckHostIP no
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
EOF2
}
