// The job ids a head with a store hands out: it keeps one id taken in the store ahead of the next
// submit (so that a job is placed without waiting for the store), and submits that come while
// none is ready wait for the next, in their order (ids follow submission order). A reservation
// that fails fails the submits waiting for it; the next submit asks again. At most one
// reservation is asked for at a time. Plain and single-threaded (the head actor owns it and asks
// the store writer when should_reserve() says so); `Submit` is what waits (the head's submits
// with their promises), a plain value in tests.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cohort::actors {

template <class Submit>
class job_id_queue {
 public:
  // Whether the head should ask the store for an id now (none held, none asked for); when it
  // does, it says so with reserving().
  bool should_reserve() const { return !reserving_ && reserved_.empty(); }
  void reserving() { reserving_ = true; }

  // A submit: the id to accept it under now, or nothing (it waits for the next reservation).
  std::optional<std::pair<Submit, std::string>> submit(Submit s) {
    if (reserved_.empty()) {
      waiting_.push_back(std::move(s));
      return std::nullopt;
    }
    auto id = std::move(reserved_);
    reserved_.clear();
    return std::make_pair(std::move(s), std::move(id));
  }

  // The store took `id`: the first waiting submit is accepted under it (returned), or it is kept
  // for the next submit.
  std::optional<std::pair<Submit, std::string>> on_reserved(std::string id) {
    reserving_ = false;
    if (waiting_.empty()) {
      reserved_ = std::move(id);
      return std::nullopt;
    }
    auto next = std::move(waiting_.front());
    waiting_.pop_front();
    return std::make_pair(std::move(next), std::move(id));
  }

  // The store could not take an id: every waiting submit fails (returned, in order).
  std::vector<Submit> on_reserve_failed() {
    reserving_ = false;
    std::vector<Submit> failed(std::make_move_iterator(waiting_.begin()),
                               std::make_move_iterator(waiting_.end()));
    waiting_.clear();
    return failed;
  }

 private:
  std::string reserved_;  // "" while none is held
  bool reserving_ = false;
  std::deque<Submit> waiting_;
};

}  // namespace cohort::actors
