// A one-way byte stream between two processes through a ring in shared
// memory: one writer, one reader, no locks. The writer owns `head` (bytes
// written so far), the reader `tail` (bytes read); each publishes its counter
// with release and reads the other's with acquire, so the bytes between them
// are whole when seen. The counters only grow (64 bits do not wrap). How a
// side that found nothing to do sleeps until the other's next step is the
// channel's (shm_channel.cpp, PairControl::bell).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dtensor::gloo_backend::shm {

struct alignas(64) RingCounters {
  std::atomic<std::uint64_t> head{0};
  char head_line[64 - sizeof(std::atomic<std::uint64_t>)];
  std::atomic<std::uint64_t> tail{0};
  char tail_line[64 - sizeof(std::atomic<std::uint64_t>)];
};

/// A view of one ring: counters and `capacity` bytes of data, both mapped.
class Ring {
 public:
  Ring(RingCounters* counters, char* data, std::uint64_t capacity)
      : c_(counters), data_(data), capacity_(capacity) {}

  /// Writer: copies up to `n` bytes of `src` in; how many fit.
  std::uint64_t write(const char* src, std::uint64_t n) {
    const std::uint64_t head = c_->head.load(std::memory_order_relaxed);
    const std::uint64_t space = capacity_ - (head - c_->tail.load(std::memory_order_acquire));
    n = n < space ? n : space;
    copy_in(head, src, n);
    if (n > 0) c_->head.store(head + n, std::memory_order_release);
    return n;
  }
  /// Writer: room for `n` bytes now.
  bool has_room(std::uint64_t n) const {
    return capacity_ - (c_->head.load(std::memory_order_relaxed) -
                        c_->tail.load(std::memory_order_acquire)) >=
           n;
  }
  /// Reader: bytes waiting.
  std::uint64_t readable() const {
    return c_->head.load(std::memory_order_acquire) - c_->tail.load(std::memory_order_relaxed);
  }
  /// Reader: copies the next `n` <= readable() bytes out, leaving them in.
  void peek(char* dst, std::uint64_t n) const {
    copy_out(c_->tail.load(std::memory_order_relaxed), dst, n);
  }
  /// Reader: copies `n` <= readable() bytes out (`dst` null: drops them).
  void read(char* dst, std::uint64_t n) {
    const std::uint64_t tail = c_->tail.load(std::memory_order_relaxed);
    if (dst != nullptr) copy_out(tail, dst, n);
    c_->tail.store(tail + n, std::memory_order_release);
  }

 private:
  void copy_in(std::uint64_t at, const char* src, std::uint64_t n) {
    const std::uint64_t pos = at % capacity_;
    const std::uint64_t first = n < capacity_ - pos ? n : capacity_ - pos;
    std::memcpy(data_ + pos, src, first);
    std::memcpy(data_, src + first, n - first);
  }
  void copy_out(std::uint64_t at, char* dst, std::uint64_t n) const {
    const std::uint64_t pos = at % capacity_;
    const std::uint64_t first = n < capacity_ - pos ? n : capacity_ - pos;
    std::memcpy(dst, data_ + pos, first);
    std::memcpy(dst + first, data_, n - first);
  }

  RingCounters* c_;
  char* data_;
  std::uint64_t capacity_;
};

}  // namespace dtensor::gloo_backend::shm
