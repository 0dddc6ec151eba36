#include "ssh/auth.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/bytes.h"

namespace hvd::ssh {
namespace {

std::string methods_offered(int mask) {
  std::vector<std::string> names;
  if (mask & SSH_AUTH_METHOD_PUBLICKEY) names.emplace_back("publickey");
  if (mask & SSH_AUTH_METHOD_PASSWORD) names.emplace_back("password");
  if (mask & SSH_AUTH_METHOD_INTERACTIVE) names.emplace_back("keyboard-interactive");
  if (mask & SSH_AUTH_METHOD_GSSAPI_MIC) names.emplace_back("gssapi-with-mic");
  if (mask & SSH_AUTH_METHOD_HOSTBASED) names.emplace_back("hostbased");
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

bool key_is_encrypted(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string pem = text.str();
  if (pem.find("ENCRYPTED") != std::string::npos) return true;  // PEM / PKCS#8
  const std::string_view kBegin = "-----BEGIN OPENSSH PRIVATE KEY-----";
  const auto begin = pem.find(kBegin);
  if (begin == std::string::npos) return false;
  // openssh-key-v1\0, then a uint32 length and the cipher name ("none" when not encrypted).
  const auto body_start = begin + kBegin.size();
  const auto body_end = std::min(pem.find("-----END", body_start), body_start + 200);
  const std::string blob =
      base64_decode(pem.substr(body_start, body_end - body_start)).value_or("");
  const std::string_view magic("openssh-key-v1\0", 15);
  if (blob.size() < magic.size() + 8 || std::string_view(blob).substr(0, 15) != magic) return false;
  return blob.substr(magic.size() + 4, 4) != "none";
}

AuthOutcome authenticate(Session& session, const ResolvedTarget& target,
                         const SshOptions& options) {
  ssh_session s = session.get();
  // "none" first: some servers let us in, and libssh lists methods only after it was tried.
  if (ssh_userauth_none(s, nullptr) == SSH_AUTH_SUCCESS) return {true, ""};
  const int offered = ssh_userauth_list(s, nullptr);

  std::vector<std::string> tried;
  if (!options.identity_file && std::getenv("SSH_AUTH_SOCK") != nullptr) {
    const int rc = ssh_userauth_agent(s, nullptr);
    if (rc == SSH_AUTH_SUCCESS) return {true, ""};
    tried.emplace_back("ssh-agent keys (none accepted)");
  }
  for (const std::string& path : target.identities) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;  // a default key that is not there
    ssh_key raw = nullptr;
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &raw) != SSH_OK) {
      tried.push_back(key_is_encrypted(path)
                          ? path + " (encrypted: needs a passphrase; load it into ssh-agent)"
                          : path + " (unreadable or not a private key)");
      continue;
    }
    Key key(raw);
    const int rc = ssh_userauth_publickey(s, nullptr, key.get());
    if (rc == SSH_AUTH_SUCCESS) return {true, ""};
    if (rc == SSH_AUTH_ERROR) {
      return {false,
              fmt::format("the connection failed while trying {}: {}", path, last_error(session))};
    }
    tried.push_back(path + (rc == SSH_AUTH_PARTIAL ? " (partial: the server wants more methods)"
                                                   : " (refused)"));
  }
  std::string keys = tried.empty() ? "none found" : fmt::format("{}", fmt::join(tried, "; "));
  return {false, fmt::format("user '{}' was not let in: the server offers {}; keys tried: {}",
                             target.user, methods_offered(offered), keys)};
}

}  // namespace hvd::ssh
