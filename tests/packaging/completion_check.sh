#!/usr/bin/env bash
# The generated bash and zsh completions (cli/option_docs.h) complete hvdrun's options in real
# shells: each shell runs in a tmux pane, `hvdrun --che<TAB>` is typed with send-keys and the
# screen is read back with capture-pane.
# Usage: completion_check.sh HVDRUN_DIR SHARE_DIR   (HVDRUN_DIR: where hvdrun is, put on PATH)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: completion_check.sh HVDRUN_DIR SHARE_DIR" >&2; exit 2; }
bindir=$(cd "$1" && pwd) share=$(cd "$2" && pwd)
fail() { echo "FAIL: $*"; [ -n "${screen:-}" ] && printf -- '---- screen ----\n%s\n----\n' "$screen"; exit 1; }
for tool in tmux zsh; do
  command -v $tool >/dev/null || { echo "skipped: $tool is not installed (bash scripts/install-deps.sh adds it)"; exit 77; }
done

# One tmux server per shell: a new session on a socket whose server is still shutting down fails
# ("server exited unexpectedly").
bash_socket=hvd-completion-bash-$$ zsh_socket=hvd-completion-zsh-$$
socket=$bash_socket
fpath_dir=$(mktemp -d)
trap 'for s in "$bash_socket" "$zsh_socket"; do tmux -L "$s" kill-server 2>/dev/null || true; done; rm -rf "$fpath_dir"' EXIT
cp "$share/_hvdrun" "$fpath_dir/"

send() { tmux -L "$socket" send-keys "$@"; }
# start COMMAND...: a detached session running it (tried three times: tmux can lose the race with
# a server that is still starting or ending on a loaded machine).
start() {
  local try
  for try in 1 2 3; do
    tmux -L "$socket" new-session -d -x 200 -y 40 "$@" && return 0
    sleep 0.5
  done
  fail "tmux could not start $*"
}
screen_now() { tmux -L "$socket" capture-pane -p | sed '/^$/d'; }
# expect REGEX WHAT: waits up to 15 s (a loaded machine, zsh's compinit) for the screen to match.
expect() {
  local i
  for i in $(seq 1 150); do
    screen=$(screen_now)
    grep -qE -- "$1" <<<"$screen" && return 0
    sleep 0.1
  done
  fail "$2"
}
# The same environment for both shells: hvdrun on PATH, nothing from the user's rc files.
env=(env -i HOME="$fpath_dir" TERM=xterm PATH="$bindir:/usr/bin:/bin")

# ---- bash ----
start "${env[@]}" bash --norc --noprofile
send "PS1='bash\$ '; source '$share/hvdrun.bash'; clear" Enter
expect '^bash\$ ?$' "bash did not start with the completion loaded"
send "hvdrun --che" Tab           # the common prefix of the --check-* options
expect '^bash\$ hvdrun --check-$' "bash: --che<TAB> did not complete to --check-"
send Tab Tab                      # the candidates
expect -- '--check-net-full' "bash: no candidates listed for --check-"
for option in --check-build --check-net --check-net-full --check-ssh; do
  expect "(^| )$option( |\$)" "bash: $option not offered for --check-"
done
send C-u "hvdrun --launcher s" Tab Tab
expect '(^| )srun +ssh( |$)' "bash: --launcher s<TAB> did not offer srun and ssh"
echo "bash: --che<TAB> -> --check-, then --check-build --check-net --check-net-full --check-ssh; --launcher s<TAB> -> srun ssh"
tmux -L "$socket" kill-server
socket=$zsh_socket

# ---- zsh ----
start "${env[@]}" zsh -f
send "PS1='zsh%% '; fpath=('$fpath_dir' \$fpath); autoload -Uz compinit; compinit -u -D; clear" Enter
expect '^zsh% ?$' "zsh did not start with compinit done"
send "hvdrun --che" Tab
expect '^zsh% hvdrun --check-' "zsh: --che<TAB> did not complete to --check-"
send Tab
expect -- '--check-ssh +-- Diagnose SSH' "zsh: the menu does not show --check-ssh with its description"
for option in --check-build --check-net --check-net-full --check-ssh; do
  expect "(^| )$option( |\$)" "zsh: $option not offered for --check-"
done
send C-u "hvdrun --launcher s" Tab
expect '(^| )srun +ssh( |$)' "zsh: --launcher s<TAB> did not offer srun and ssh"
echo "zsh: --che<TAB> -> --check-, then the four --check-* options with descriptions; --launcher s<TAB> -> srun ssh"
echo "completion check: OK"
