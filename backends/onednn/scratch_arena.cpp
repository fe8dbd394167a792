#include "backends/onednn/scratch_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace dtensor::onednn {
namespace {

constexpr std::size_t kAlign = 4096;
constexpr std::size_t kMinChunk = std::size_t{256} << 10;

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

ScratchArena& ScratchArena::for_this_thread() {
  thread_local ScratchArena arena;
  return arena;
}

ScratchArena::~ScratchArena() {
  for (const Chunk& c : chunks_)
    unmap(c);
}

ScratchArena::Chunk ScratchArena::map_chunk(std::size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return {static_cast<char*>(p), size};
}

void ScratchArena::unmap(const Chunk& c) {
  munmap(c.data, c.size);
}

void* ScratchArena::take(std::size_t n) {
  n = round_up(n == 0 ? 1 : n, kAlign);
  if (!chunks_.empty() && offset_ + n <= chunks_[chunk_].size) {
    void* p = chunks_[chunk_].data + offset_;
    offset_ += n;
    return p;
  }
  // The next chunk, if it is free and large enough; chunks above the top of
  // the stack hold nothing, so a too-small one is replaced.
  const std::size_t next = chunks_.empty() ? 0 : chunk_ + 1;
  if (next < chunks_.size() && chunks_[next].size < n) {
    for (std::size_t i = next; i < chunks_.size(); ++i)
      unmap(chunks_[i]);
    chunks_.resize(next);
  }
  if (next == chunks_.size())
    chunks_.push_back(map_chunk(round_up(std::max(n, kMinChunk), kAlign)));
  chunk_ = next;
  offset_ = n;
  return chunks_[chunk_].data;
}

void ScratchArena::release(Mark m) {
  chunk_ = m.chunk;
  offset_ = m.offset;
  if (chunk_ != 0 || offset_ != 0 || chunks_.size() <= 1) return;
  const std::size_t total = capacity();
  for (const Chunk& c : chunks_)
    unmap(c);
  chunks_.clear();
  chunks_.push_back(map_chunk(total));
}

std::size_t ScratchArena::capacity() const {
  std::size_t total = 0;
  for (const Chunk& c : chunks_)
    total += c.size;
  return total;
}

}  // namespace dtensor::onednn
