// The Gloo group's collective thread (backends/gloo/collective_thread.h): a
// call that never returns on its own (as a Gloo wait on a half-read message
// does) must not keep its caller once the group is aborted.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <catch2/catch.hpp>

#include "backends/gloo/collective_thread.h"
#include "dtensor/core/errors.h"

using namespace dtensor;
using namespace std::chrono_literals;

namespace {

// A latch the test opens; the blocked call waits on it.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("collective thread: runs calls in order and returns what they threw", "[comm][gloo]") {
  gloo_backend::CollectiveThread thread;
  int sum = 0;
  for (int i = 1; i <= 100; ++i)
    thread.run("add", [&sum, i] { sum += i; });
  CHECK(sum == 5050);
  CHECK_THROWS_WITH(thread.run("boom", [] { throw std::runtime_error("boom inside"); }),
                    "boom inside");
  thread.run("after", [&sum] { sum = -1; });  // a throwing call leaves it usable
  CHECK(sum == -1);
}

TEST_CASE("collective thread: abort ends the wait for a call that never returns", "[comm][gloo]") {
  auto gate = std::make_shared<Gate>();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  const auto t0 = std::chrono::steady_clock::now();
  {
    gloo_backend::CollectiveThread thread;
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      thread.abort("rank 3 failed: killed");
    });
    // The call owns what it uses (the gate, the flag), as the group's calls do.
    CHECK_THROWS_WITH(thread.run(
                          "allreduce(sum, 4 x f32)",
                          [gate, finished] {
                            gate->wait();
                            finished->store(true);
                          },
                          50ms),
                      Catch::Contains("allreduce(sum, 4 x f32)") && Catch::Contains("abandoned") &&
                          Catch::Contains("rank 3 failed: killed"));
    aborter.join();
    CHECK(seconds_since(t0) < 2.0);  // the abort's 100 ms and the grace, not forever
    CHECK_FALSE(finished->load());
    // Later calls fail at once, without reaching the (busy) thread.
    CHECK_THROWS_WITH(thread.run("barrier", [] {}),
                      Catch::Contains("barrier") && Catch::Contains("aborted"));
  }  // the group (and its thread object) goes while the call is still blocked
  gate->release();
  for (int i = 0; i < 200 && !finished->load(); ++i)
    std::this_thread::sleep_for(5ms);
  CHECK(finished->load());  // the abandoned call ran to its end on the detached thread
}

TEST_CASE("collective thread: a call that ends within the grace after an abort reports itself",
          "[comm][gloo]") {
  gloo_backend::CollectiveThread thread;
  auto gate = std::make_shared<Gate>();
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    thread.abort("the job failed");
    std::this_thread::sleep_for(20ms);
    gate->release();  // as Gloo's own wait fails once its connections closed
  });
  CHECK_THROWS_WITH(thread.run(
                        "broadcast",
                        [gate] {
                          gate->wait();
                          throw CommError("gloo", "connection closed by peer");
                        },
                        2000ms),
                    Catch::Contains("connection closed by peer"));
  aborter.join();
}
