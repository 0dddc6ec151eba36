// Socket, process and file helpers shared by the fake servers (fake_servers.cpp) and the sshd
// instances (sshd_instance.cpp). Internal to hvd_test_support.
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

namespace hvd::test::internal {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// sshd re-executes itself for every connection, so it must be started by its absolute path.
inline constexpr const char* kSshd = "/usr/sbin/sshd";

[[noreturn]] void fail(const std::string& what, int err = errno);
void close_fd(int& fd);
sockaddr_in ipv4(const std::string& address, int port);
// A socket bound to address:port (port 0: the kernel's choice, written back).
int bound_socket(const std::string& address, int& port);
int start_connect(const std::string& address, int port);
int finish_connect(int fd, milliseconds timeout);
bool discard_input(int fd);
int run_quiet(std::vector<std::string> argv);
std::string read_file(const std::string& path);
bool config_safe(const std::string& path);
std::string make_temp_dir();
std::vector<pid_t> children_of(pid_t pid);

}  // namespace hvd::test::internal
