// This machine's network interfaces and the checks of a named one (see network_interfaces.hpp).
#include "core/comm/network_interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <sstream>
#include <system_error>

namespace cohort::core::comm {
namespace {

// The numeric form of an AF_INET/AF_INET6 address; "" for another family.
std::string numeric(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  else if (addr->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text, sizeof text);
  return text;
}

// The numeric addresses `address` stands for: itself when numeric, else what the resolver says.
std::vector<std::string> resolve(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.c_str(), nullptr, &hints, &found) != 0) return {};
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
  std::vector<std::string> out;
  for (auto* a = found; a != nullptr; a = a->ai_next) {
    auto text = numeric(a->ai_addr);
    if (!text.empty() && std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

std::vector<network_interface> list_network_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    throw std::system_error(errno, std::generic_category(), "getifaddrs (listing network interfaces)");
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owner(list, &::freeifaddrs);
  std::vector<network_interface> out;
  for (auto* i = list; i != nullptr; i = i->ifa_next) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const network_interface& n) { return n.name == i->ifa_name; });
    if (it == out.end()) {
      out.push_back({i->ifa_name, {}, (i->ifa_flags & IFF_UP) != 0, (i->ifa_flags & IFF_LOOPBACK) != 0});
      it = out.end() - 1;
    }
    if (i->ifa_addr == nullptr) continue;
    auto text = numeric(i->ifa_addr);
    if (text.empty()) continue;
    // IPv4 first: that is the address peers are given unless an interface has only IPv6.
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto first_v6 =
          std::find_if(it->addresses.begin(), it->addresses.end(),
                       [](const std::string& a) { return a.find(':') != std::string::npos; });
      it->addresses.insert(first_v6, text);
    } else {
      it->addresses.push_back(text);
    }
  }
  return out;
}

std::string describe_network_interfaces(const std::vector<network_interface>& interfaces) {
  std::string out;
  for (const auto& i : interfaces) {
    out += (out.empty() ? "" : ", ") + i.name + " (";
    if (i.addresses.empty()) out += "no address";
    for (std::size_t k = 0; k < i.addresses.size(); ++k) out += (k ? " " : "") + i.addresses[k];
    out += i.up ? ")" : ", down)";
  }
  return out.empty() ? "none" : out;
}

std::optional<std::string> interface_of_address(const std::string& address,
                                                const std::vector<network_interface>& interfaces) {
  for (const auto& wanted : resolve(address))
    for (const auto& i : interfaces)
      if (std::find(i.addresses.begin(), i.addresses.end(), wanted) != i.addresses.end()) return i.name;
  return std::nullopt;
}

std::optional<bool> is_this_machine(const std::string& host,
                                    const std::vector<network_interface>& interfaces) {
  const auto addresses = resolve(host);
  if (addresses.empty()) return std::nullopt;
  for (const auto& a : addresses) {
    if (a.rfind("127.", 0) == 0 || a == "::1") return true;
    for (const auto& i : interfaces)
      if (std::find(i.addresses.begin(), i.addresses.end(), a) != i.addresses.end()) return true;
  }
  return false;
}

std::string check_gloo_interface(const std::string& name, const std::vector<network_interface>& interfaces) {
  const std::string there = "; this machine's interfaces: " + describe_network_interfaces(interfaces);
  if (name.find(',') != std::string::npos)
    return "'" + name + "' names several interfaces; cohort's Gloo transport uses one: name one of them" +
           there;
  const auto it = std::find_if(interfaces.begin(), interfaces.end(),
                               [&](const network_interface& i) { return i.name == name; });
  if (it == interfaces.end()) return "there is no network interface '" + name + "'" + there;
  if (!it->up) return "network interface '" + name + "' is down" + there;
  if (it->addresses.empty()) return "network interface '" + name + "' has no IP address" + there;
  return "";
}

std::string check_nccl_socket_ifname(const std::string& value,
                                     const std::vector<network_interface>& interfaces) {
  if (!value.empty() && value[0] == '^') return "";  // exclusions: NCCL picks among the rest
  const bool exact = !value.empty() && value[0] == '=';
  const auto items = split_commas(exact ? value.substr(1) : value);
  for (const auto& item : items)
    for (const auto& i : interfaces)
      if (exact ? i.name == item : i.name.rfind(item, 0) == 0) return "";
  return "'" + value + "' selects no network interface (" + (exact ? "exact names" : "name prefixes") +
         "); this machine's interfaces: " + describe_network_interfaces(interfaces);
}

}  // namespace cohort::core::comm
