// Reuses Gloo unbound buffers across point-to-point operations on the same
// memory (a halo loop sends from and receives into the same tensors every
// step).
//
// Why: destroying a Gloo tcp::UnboundBuffer spins (std::this_thread::yield)
// until Gloo's event-loop thread releases its last reference, and that
// thread often still holds one just after an operation completes. On a busy
// machine the spin costs milliseconds per message. A buffer that goes back to
// the pool is not destroyed, and reusing it also saves its setup.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

namespace dtensor::gloo_backend {

class BufferPool {
 public:
  /// Buffers kept idle at most; the oldest go first.
  static constexpr std::size_t kCapacity = 64;

  /// An idle buffer over exactly [ptr, ptr + nbytes), or a new one.
  std::unique_ptr<::gloo::transport::UnboundBuffer> acquire(::gloo::Context& context, void* ptr,
                                                            std::size_t nbytes) {
    {
      std::lock_guard lock(mutex_);
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if ((*it)->ptr == ptr && (*it)->size == nbytes) {
          auto buf = std::move(*it);
          idle_.erase(it);
          return buf;
        }
      }
    }
    return context.createUnboundBuffer(ptr, nbytes);
  }

  /// Only for a buffer with no operation pending (every send/recv waited for).
  void release(std::unique_ptr<::gloo::transport::UnboundBuffer> buf) {
    std::unique_ptr<::gloo::transport::UnboundBuffer> evicted;
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(buf));
    if (idle_.size() > kCapacity) {
      evicted = std::move(idle_.front());
      idle_.pop_front();
    }
  }

  void clear() {
    std::lock_guard lock(mutex_);
    idle_.clear();
  }

 private:
  std::mutex mutex_;
  std::deque<std::unique_ptr<::gloo::transport::UnboundBuffer>> idle_;
};

}  // namespace dtensor::gloo_backend
