// Which network interface a rank's collectives use: this machine's interfaces and their addresses
// (getifaddrs), the interface that holds a node's address, and the checks of an interface a node
// or a job names (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME). No torch: cluster-worker checks its
// --collective-interface with it too.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cohort::core::comm {

// One interface of this machine's network stack (its namespace) and its IP addresses (numeric,
// IPv4 first); an interface without an address has none listed.
struct network_interface {
  std::string name;
  std::vector<std::string> addresses;
  bool up = false;
  bool loopback = false;
};

// Every interface of this process's network namespace, in the kernel's order. Throws
// std::system_error when getifaddrs fails.
std::vector<network_interface> list_network_interfaces();

// "lo (127.0.0.1), eth0 (10.213.0.3)": for error messages.
std::string describe_network_interfaces(const std::vector<network_interface>& interfaces);

// The interface that holds `address` (numeric IPv4/IPv6, or a host name resolved first); nullopt
// when no interface of this machine holds it (e.g. an address that a NAT maps here).
std::optional<std::string> interface_of_address(const std::string& address,
                                                const std::vector<network_interface>& interfaces);

// Whether `host` (an address, or a name resolved first) is this machine: an address one of
// `interfaces` holds, or a loopback one (127.0.0.0/8, ::1); nullopt when it does not resolve.
std::optional<bool> is_this_machine(const std::string& host,
                                    const std::vector<network_interface>& interfaces);

// "" when `name` is one interface of `interfaces` that is up and has an address (what Gloo's TCP
// device needs); else why not, naming it and listing the interfaces there are.
std::string check_gloo_interface(const std::string& name, const std::vector<network_interface>& interfaces);

// "" when an NCCL_SOCKET_IFNAME value selects at least one interface of `interfaces` the way NCCL
// reads it (a comma list of name prefixes; "=" first: exact names; "^" first: names to exclude,
// which always leaves NCCL its own choice); else why not, naming the value and the interfaces.
std::string check_nccl_socket_ifname(const std::string& value,
                                     const std::vector<network_interface>& interfaces);

}  // namespace cohort::core::comm
