// The client protocol: every request a client (`submit`, the embedded cluster) sends the head, the
// one reply type the head answers it with, and whether it is safe to send again. This table is the
// only list of client requests: the head actor builds its client handlers from it (a request
// without a `serve_client` overload of the right reply type does not compile), the head gateway
// forwards exactly the requests it lists, tools/cluster_client and actors/local_cluster take the
// reply type from it (a request not listed does not compile), and wire_protocol.cpp asserts that
// the codec registers every type it names.
// Header only; no CAF beyond messages.hpp's type_name.
#pragma once

#include <cstddef>
#include <type_traits>

#include "actors/messages.hpp"

namespace cohort::actors {

// query: reads the head's state; a client may send it again to another head when its head went
// silent. command: changes something; never sent twice (the silent head may have carried it out).
// follow: a query whose reply is followed by job_event messages until the job ends.
enum class call_kind { query, command, follow };

template <class Request, class Reply, call_kind Kind>
struct client_call {
  using request = Request;
  using reply = Reply;
  static constexpr call_kind kind = Kind;
};

template <class... Calls>
struct call_list {
  static constexpr std::size_t size = sizeof...(Calls);
};

using client_calls = call_list<
    client_call<submit_job, job_accepted, call_kind::command>,
    client_call<job_query, job_record, call_kind::query>,
    client_call<job_list_query, job_list, call_kind::query>,
    client_call<stop_job, job_record, call_kind::command>,
    client_call<checkpoint_job, job_record, call_kind::command>,
    client_call<release_job, job_record, call_kind::command>,
    client_call<follow_job, job_record, call_kind::follow>,
    client_call<logs_query, job_logs, call_kind::query>,
    client_call<follow_logs, followed_logs, call_kind::follow>,
    client_call<plan_request, plan_reply, call_kind::query>,
    client_call<drain_node, drain_reply, call_kind::command>>;

namespace detail {

template <class Request, class... Calls>
struct find_call {
  using type = void;
};
template <class Request, class Call, class... Calls>
struct find_call<Request, Call, Calls...>
    : std::conditional_t<std::is_same_v<Request, typename Call::request>,
                         std::enable_if<true, Call>, find_call<Request, Calls...>> {};

template <class Request, class List>
struct call_in;
template <class Request, class... Calls>
struct call_in<Request, call_list<Calls...>> : find_call<Request, Calls...> {};

template <class Request, class... Calls>
constexpr std::size_t count_of = (std::size_t{0} + ... +
                                  (std::is_same_v<Request, typename Calls::request> ? 1 : 0));

template <class... Calls>
constexpr bool distinct(call_list<Calls...>) {
  return ((count_of<typename Calls::request, Calls...> == 1) && ...);
}

}  // namespace detail

static_assert(detail::distinct(client_calls{}), "a client request is listed twice in client_calls");

// Whether `Request` is a client request of the table.
template <class Request>
constexpr bool is_client_request = !std::is_void_v<typename detail::call_in<Request, client_calls>::type>;

// The table's entry for `Request`; a request that is not listed does not compile.
template <class Request>
struct client_call_of {
  using type = typename detail::call_in<Request, client_calls>::type;
  static_assert(!std::is_void_v<type>,
                "not a client request: list it with its reply in client_calls (actors/client_protocol.hpp)");
};
template <class Request>
using reply_to = typename client_call_of<Request>::type::reply;

// Whether a client may send `Request` again to another head when its head went silent.
template <class Request>
constexpr bool retry_safe = client_call_of<Request>::type::kind != call_kind::command;

// Calls f(Call{}) for every entry of the table, in order.
template <class F, class... Calls>
void for_each_client_call(call_list<Calls...>, F&& f) {
  (f(Calls{}), ...);
}
template <class F>
void for_each_client_call(F&& f) {
  for_each_client_call(client_calls{}, std::forward<F>(f));
}

}  // namespace cohort::actors
