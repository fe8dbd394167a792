// Scratch memory for the oneDNN passes: band buffers, reordered weights, the
// f32 carry of bf16 bands. A per-thread stack of bytes: a pass takes what it
// needs and gives it all back when its ScratchScope ends, and the next pass
// reuses the same pages.
//
// Why not malloc: these buffers are a few hundred KiB. Once glibc has freed
// one mmapped block it raises its mmap threshold and serves the next ones
// from its heap, and what they leave there when freed stays resident,
// fragmented by the small allocations in between (3x3 64->64 128^2 f32, P=2:
// ~0.4 MiB of 8.3 MiB of tensors, found by trimming the heap after each pass).
// Here the memory a thread keeps is the most any one pass needed at once.
#pragma once

#include <cstddef>
#include <vector>

namespace dtensor::onednn {

class ScratchArena {
 public:
  /// Requests this large or larger go to the library's block cache instead
  /// (core/storage.cpp), which keeps large blocks by size.
  static constexpr std::size_t kMaxRequest = std::size_t{1} << 20;

  struct Mark {
    std::size_t chunk = 0, offset = 0;
  };

  static ScratchArena& for_this_thread();

  ScratchArena() = default;
  ~ScratchArena();
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  /// Where the stack stands now: hand it back to release().
  Mark mark() const { return {chunk_, offset_}; }
  /// `n` bytes, 4 KiB aligned, valid until release() of a mark taken before.
  void* take(std::size_t n);
  /// Gives back everything taken since `m`. Fully released, the arena merges
  /// its chunks into one as large as all of them, so that the next pass that
  /// needs as much finds it in one piece.
  void release(Mark m);

  /// Bytes mapped (for tests).
  std::size_t capacity() const;

 private:
  struct Chunk {
    char* data = nullptr;
    std::size_t size = 0;
  };
  static Chunk map_chunk(std::size_t size);
  static void unmap(const Chunk& c);

  std::vector<Chunk> chunks_;
  std::size_t chunk_ = 0, offset_ = 0;  // the top of the stack
};

}  // namespace dtensor::onednn
