// Which interface collectives use: this machine's interfaces, the one that holds an address, and
// the checks of a GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME value, each refusal naming the value.
#include "core/comm/network_interfaces.hpp"

#include <catch2/catch.hpp>

using namespace cohort::core::comm;

namespace {

// A machine with loopback, eth0 and a down eth1, and ib0 without an address.
std::vector<network_interface> some_machine() {
  return {{"lo", {"127.0.0.1", "::1"}, true, true},
          {"eth0", {"10.213.0.3"}, true, false},
          {"eth1", {"192.168.7.2"}, false, false},
          {"ib0", {}, true, false}};
}

}  // namespace

TEST_CASE("this machine's interfaces include loopback, which holds 127.0.0.1 and localhost",
          "[core][comm]") {
  const auto here = list_network_interfaces();
  CHECK(interface_of_address("127.0.0.1", here) == std::optional<std::string>("lo"));
  CHECK(interface_of_address("localhost", here) == std::optional<std::string>("lo"));
  CHECK_THAT(describe_network_interfaces(here), Catch::Contains("lo (127.0.0.1"));
  CHECK(check_gloo_interface("lo", here).empty());
}

TEST_CASE("the interface that holds an address is found among the machine's, and none for an address "
          "no interface holds",
          "[core][comm]") {
  const auto m = some_machine();
  CHECK(interface_of_address("10.213.0.3", m) == std::optional<std::string>("eth0"));
  CHECK(interface_of_address("::1", m) == std::optional<std::string>("lo"));
  CHECK_FALSE(interface_of_address("10.213.0.4", m));
  CHECK(describe_network_interfaces(m) ==
        "lo (127.0.0.1 ::1), eth0 (10.213.0.3), eth1 (192.168.7.2, down), ib0 (no address)");
}

TEST_CASE("a Gloo interface must exist, be up and have an address, one name only; each refusal names "
          "it and lists the interfaces there are",
          "[core][comm]") {
  const auto m = some_machine();
  CHECK(check_gloo_interface("eth0", m).empty());
  CHECK_THAT(check_gloo_interface("eth7", m),
             Catch::StartsWith("there is no network interface 'eth7'") &&
                 Catch::Contains("interfaces: lo (127.0.0.1 ::1), eth0 (10.213.0.3)"));
  CHECK_THAT(check_gloo_interface("eth1", m), Catch::StartsWith("network interface 'eth1' is down"));
  CHECK_THAT(check_gloo_interface("ib0", m), Catch::StartsWith("network interface 'ib0' has no IP address"));
  CHECK_THAT(check_gloo_interface("eth0,ib0", m), Catch::Contains("names several interfaces"));
}

TEST_CASE("an NCCL_SOCKET_IFNAME value passes when it selects an interface as NCCL reads it: name "
          "prefixes, exact names after '=', exclusions after '^'",
          "[core][comm]") {
  const auto m = some_machine();
  CHECK(check_nccl_socket_ifname("eth", m).empty());
  CHECK(check_nccl_socket_ifname("bond,ib", m).empty());
  CHECK(check_nccl_socket_ifname("=eth0", m).empty());
  CHECK(check_nccl_socket_ifname("^docker,lo", m).empty());
  CHECK_THAT(check_nccl_socket_ifname("=eth", m),
             Catch::StartsWith("'=eth' selects no network interface (exact names)"));
  CHECK_THAT(check_nccl_socket_ifname("enp", m),
             Catch::StartsWith("'enp' selects no network interface (name prefixes)") &&
                 Catch::Contains("eth0 (10.213.0.3)"));
}

TEST_CASE("a host is this machine when an interface holds its address or it is a loopback one, and "
          "unknown when it does not resolve",
          "[core][comm]") {
  const auto m = some_machine();
  CHECK(is_this_machine("10.213.0.3", m) == std::optional<bool>(true));
  CHECK(is_this_machine("127.0.1.1", m) == std::optional<bool>(true));  // Debian's own host name
  CHECK(is_this_machine("localhost", m) == std::optional<bool>(true));
  CHECK(is_this_machine("10.213.0.1", m) == std::optional<bool>(false));
  CHECK_FALSE(is_this_machine("no-such-host.invalid", m));
}
