// A CPU stand-in for the CUDA the printer emits, to run its kernels where
// there is no GPU: one OS thread per CUDA thread, blocks one after another,
// `__shared__` arrays as function statics (one block lives at a time),
// `__syncthreads()` as a std::barrier, atomics as std::atomic_ref (16-bit
// float atomics under a lock), `__half` as _Float16 and `__nv_bfloat16` as
// its bits with round-to-nearest-even conversions. WMMA fragments hold
// their whole tile in every lane: each lane loads and multiplies the full
// 16x16 tile, and lane 0 alone stores. Compiled with g++ -std=c++20.
#pragma once
#include <atomic>
#include <algorithm>
#include <barrier>
#include <deque>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <math.h>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
// Dynamic shared memory: a function static, as static shared arrays are.
#define SPINDLE_DYNAMIC_SHARED(name, bytes) static __attribute__((aligned(128))) unsigned char name[bytes]

struct EmuIdx {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmuIdx threadIdx;
inline thread_local EmuIdx blockIdx;
inline EmuIdx blockDim;
inline EmuIdx gridDim;

namespace emu {
inline std::barrier<> *block_barrier = nullptr;
// One barrier per warp of the block, and a slot per thread, for shuffles.
inline std::barrier<> *const *warp_barriers = nullptr;
// A barrier per aligned team of 2^b lanes (b = 0..4), `team_barriers[b]`
// indexed by the team's first thread / 2^b: a shuffle whose mask names a
// team of a warp syncs that team alone, since other teams of the warp
// may be elsewhere (the warp walk's teams each walk their own run).
inline std::barrier<> *const *team_barriers[5] = {};
inline unsigned long long shuffle_slots[1024];
inline std::mutex atomic_lock;
template <class To, class From> inline To bits(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}
}  // namespace emu

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
// A barrier that returns whether any thread's predicate held.
inline int __syncthreads_or(int pred) {
  static std::atomic<int> any{0};
  emu::block_barrier->arrive_and_wait();
  if (pred) any.store(1);
  emu::block_barrier->arrive_and_wait();
  const int result = any.load();
  emu::block_barrier->arrive_and_wait();
  // Every thread has read it: thread 0 clears it before the next call's first barrier.
  if (threadIdx.x == 0) any.store(0);
  return result;
}

// A warp's lanes exchange through the slots, between barriers of the warp
// alone (the code around a shuffle is warp-uniform, not block-uniform, and
// every lane of the warp must reach it). `source` maps a lane to the lane
// it reads, or to -1 for its own value.
namespace emu {
// The barrier of the lanes `mask` names: the warp's, or an aligned team's
// (a mask of 2^b consecutive lanes starting at a multiple of 2^b).
inline std::barrier<> &lanes_barrier(unsigned mask) {
  const int size = __builtin_popcount(mask);
  if (mask == 0xffffffffu || (size & (size - 1)) != 0) return *warp_barriers[threadIdx.x / 32];
  const int b = __builtin_ctz((unsigned)size);
  return *team_barriers[b][threadIdx.x >> b];
}
template <class T, class F> inline T shuffle(unsigned mask, T v, F source) {
  static_assert(sizeof(T) <= sizeof(unsigned long long));
  std::barrier<> &warp = lanes_barrier(mask);
  warp.arrive_and_wait();
  std::memcpy(&shuffle_slots[threadIdx.x], &v, sizeof v);
  warp.arrive_and_wait();
  const unsigned lane = threadIdx.x % 32;
  const int src = source(lane);
  T r = v;
  if (src >= 0) std::memcpy(&r, &shuffle_slots[threadIdx.x - lane + src], sizeof r);
  warp.arrive_and_wait();
  return r;
}
}  // namespace emu

template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::shuffle(mask, v, [&](unsigned lane) {
    const unsigned end = (lane & ~(unsigned)(width - 1)) + width;
    return lane + delta < end ? (int)(lane + delta) : -1;
  });
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::shuffle(mask, v, [&](unsigned lane) {
    const unsigned start = lane & ~(unsigned)(width - 1);
    return lane >= start + delta ? (int)(lane - delta) : -1;
  });
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, unsigned lane_mask, int width = 32) {
  return emu::shuffle(mask, v, [&](unsigned lane) {
    const unsigned start = lane & ~(unsigned)(width - 1), src = lane ^ lane_mask;
    return src >= start && src < start + width ? (int)src : -1;
  });
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return emu::shuffle(mask, v, [&](unsigned lane) {
    const unsigned start = lane & ~(unsigned)(width - 1);
    return (int)(start + ((unsigned)src_lane % (unsigned)width));
  });
}
// The lanes of `mask` whose predicate holds: one exchange through the slots.
inline unsigned __ballot_sync(unsigned mask, int pred) {
  std::barrier<> &warp = emu::lanes_barrier(mask);
  warp.arrive_and_wait();
  emu::shuffle_slots[threadIdx.x] = pred ? 1 : 0;
  warp.arrive_and_wait();
  const unsigned base = threadIdx.x - threadIdx.x % 32;
  unsigned bits = 0;
  // (Only the lanes of the mask: another team's slots may be being written.)
  for (unsigned src = 0; src < 32 && base + src < blockDim.x; src++) {
    if ((mask >> src & 1u) && emu::shuffle_slots[base + src]) bits |= 1u << src;
  }
  warp.arrive_and_wait();
  return bits & mask;
}
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
// 16 bytes moved as one (LDG.E.128 / STG.E.128 on a GPU).
struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
// 8 bytes moved as one (LDG.E.64).
struct __attribute__((aligned(8))) uint2 {
  unsigned x, y;
};

// cp.async: each thread's copies wait in commit groups and land only when
// a wait lets them (the latest a GPU may complete them), so a read of a
// buffer before its wait sees the old contents, and a copy into a buffer
// another warp still reads races under TSan.
#define SPINDLE_EMULATED 1
namespace emu {
struct Copy16 {
  void *to;
  const void *from;
};
inline thread_local std::vector<Copy16> open_group;
inline thread_local std::deque<std::vector<Copy16>> copy_groups;
}  // namespace emu
inline unsigned long long spindle_evict_last() { return 0; }
inline unsigned long long spindle_evict_first() { return 0; }
// 16-byte loads and stores under an L2 policy: plain ones, checked aligned.
inline void spindle_check16(const void *p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    std::fprintf(stderr, "misaligned 16-byte access\n");
    std::abort();
  }
}
inline uint4 spindle_ld16_hint(const void *p, unsigned long long) {
  spindle_check16(p);
  return *reinterpret_cast<const uint4 *>(p);
}
inline void spindle_st16_hint(void *p, uint4 v, unsigned long long) {
  spindle_check16(p);
  *reinterpret_cast<uint4 *>(p) = v;
}
inline void spindle_cp_async16(void *smem, const void *gmem) {
  if (reinterpret_cast<uintptr_t>(smem) % 16 != 0 || reinterpret_cast<uintptr_t>(gmem) % 16 != 0) {
    std::fprintf(stderr, "misaligned 16-byte cp.async\n");
    std::abort();
  }
  emu::open_group.push_back({smem, gmem});
}
inline void spindle_cp_async16_keep(void *smem, const void *gmem, unsigned long long) { spindle_cp_async16(smem, gmem); }
inline void spindle_cp_async_commit() {
  emu::copy_groups.push_back(std::move(emu::open_group));
  emu::open_group.clear();
}
template <int N> inline void spindle_cp_async_wait() {
  while (emu::copy_groups.size() > (size_t)N) {
    for (const emu::Copy16 &c : emu::copy_groups.front()) std::memcpy(c.to, c.from, 16);
    emu::copy_groups.pop_front();
  }
}

// Half types.
typedef _Float16 __half;
inline float __half2float(__half x) { return (float)x; }
inline __half __float2half(float x) { return (__half)x; }
inline __half __double2half(double x) { return (__half)x; }
inline unsigned short __half_as_ushort(__half x) { return emu::bits<unsigned short>(x); }
inline __half __ushort_as_half(unsigned short x) { return emu::bits<__half>(x); }

struct __nv_bfloat16 {
  unsigned short b;
};
inline float __bfloat162float(__nv_bfloat16 x) { return emu::bits<float>((unsigned)x.b << 16); }
inline __nv_bfloat16 __float2bfloat16(float x) {
  unsigned u = emu::bits<unsigned>(x);
  if (std::isnan(x)) return {0x7fc0};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(unsigned short)(u >> 16)};
}
inline __nv_bfloat16 __double2bfloat16(double x) { return __float2bfloat16((float)x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 x) { return x.b; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }

// Bit casts.
inline float __int_as_float(int x) { return emu::bits<float>(x); }
inline float __uint_as_float(unsigned x) { return emu::bits<float>(x); }
inline unsigned __float_as_uint(float x) { return emu::bits<unsigned>(x); }
inline double __longlong_as_double(long long x) { return emu::bits<double>(x); }
inline long long __double_as_longlong(double x) { return emu::bits<long long>(x); }

// Atomics.
inline int atomicAdd(int *p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
inline float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double *p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }
inline __half atomicAdd(__half *p, __half v) {
  std::lock_guard<std::mutex> g(emu::atomic_lock);
  __half old = *p;
  *p = (__half)((float)old + (float)v);
  return old;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *p, __nv_bfloat16 v) {
  std::lock_guard<std::mutex> g(emu::atomic_lock);
  __nv_bfloat16 old = *p;
  *p = __float2bfloat16(__bfloat162float(old) + __bfloat162float(v));
  return old;
}
struct __half2 {
  __half x, y;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __half2 __floats2half2_rn(float a, float b) { return {(__half)a, (__half)b}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline __half2 atomicAdd(__half2 *p, __half2 v) {
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0) {
    std::fprintf(stderr, "misaligned __half2 atomic\n");
    std::abort();
  }
  std::lock_guard<std::mutex> g(emu::atomic_lock);
  __half2 old = *p;
  *p = {(__half)((float)old.x + (float)v.x), (__half)((float)old.y + (float)v.y)};
  return old;
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162 *p, __nv_bfloat162 v) {
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0) {
    std::fprintf(stderr, "misaligned __nv_bfloat162 atomic\n");
    std::abort();
  }
  std::lock_guard<std::mutex> g(emu::atomic_lock);
  __nv_bfloat162 old = *p;
  p->x = __float2bfloat16(__bfloat162float(old.x) + __bfloat162float(v.x));
  p->y = __float2bfloat16(__bfloat162float(old.y) + __bfloat162float(v.y));
  return old;
}
template <class T> inline T emu_cas(T *p, T expected, T desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);
  return expected;
}
inline unsigned atomicCAS(unsigned *p, unsigned c, unsigned v) { return emu_cas(p, c, v); }
inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long c, unsigned long long v) {
  return emu_cas(p, c, v);
}
inline unsigned short atomicCAS(unsigned short *p, unsigned short c, unsigned short v) { return emu_cas(p, c, v); }
// Blocks run one after another here, so a fence orders only this block's threads.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T> inline T __ldcg(const T *p) { return std::atomic_ref<T>(*const_cast<T *>(p)).load(std::memory_order_relaxed); }

// WMMA.
namespace emu {
inline float to_float(float x) { return x; }
inline float to_float(__half x) { return (float)x; }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
}  // namespace emu
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}
template <class Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  static constexpr int rows = shape_of<Use, M, N, K>::rows, cols = shape_of<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols;
  float x[num_elements];
};
template <class F> inline void fill_fragment(F &f, float v) {
  for (auto &e : f.x) e = v;
}
template <class F, class T> inline void load_matrix_sync(F &f, const T *p, unsigned ldm) {
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = emu::to_float(p[r * ldm + c]);
}
template <class C, class A, class B> inline void mma_sync(C &d, const A &a, const B &b, const C &c) {
  C t = c;
  for (int i = 0; i < C::rows; i++)
    for (int j = 0; j < C::cols; j++) {
      float s = t.x[i * C::cols + j];
      for (int k = 0; k < A::cols; k++) s += a.x[i * A::cols + k] * b.x[k * B::cols + j];
      t.x[i * C::cols + j] = s;
    }
  d = t;
}
// An accumulator from memory (its layout named, as for a store).
template <class F, class T> inline void load_matrix_sync(F &f, const T *p, unsigned ldm, layout_t) {
  load_matrix_sync(f, p, ldm);
}
// Lane 0 stores the tile, converting as the fragment's element type does.
// The store is the warp's, as on a GPU: every lane has finished what it
// read before (a tile it loads and stores back) and reads after it what
// lane 0 wrote.
template <class F, class T> inline void store_matrix_sync(T *p, const F &f, unsigned ldm, layout_t) {
  std::barrier<> &warp = *emu::warp_barriers[threadIdx.x / 32];
  warp.arrive_and_wait();
  if (threadIdx.x % 32 == 0)
    for (int r = 0; r < F::rows; r++)
      for (int c = 0; c < F::cols; c++) p[r * ldm + c] = (T)f.x[r * F::cols + c];
  warp.arrive_and_wait();
}
inline float __float_to_tf32(float x) {
  unsigned u = emu::bits<unsigned>(x);
  u = (u + 0x1000u) & 0xffffe000u;
  return emu::bits<float>(u);
}
}  // namespace wmma
}  // namespace nvcuda

namespace emu {
// Runs `kernel` over `grid` blocks of `block` threads.
inline void launch(unsigned grid, unsigned block, const std::function<void()> &kernel) {
  std::barrier<> barrier(block);
  block_barrier = &barrier;
  std::deque<std::barrier<>> warps;
  std::vector<std::barrier<> *> warp_pointers;
  for (unsigned w = 0; w * 32 < block; w++) warp_pointers.push_back(&warps.emplace_back(std::min(32u, block - w * 32)));
  warp_barriers = warp_pointers.data();
  std::deque<std::barrier<>> teams;
  std::vector<std::barrier<> *> team_pointers[5];
  for (unsigned b = 0; b < 5; b++) {
    const unsigned size = 1u << b;
    for (unsigned t = 0; t * size < block; t++) team_pointers[b].push_back(&teams.emplace_back(std::min(size, block - t * size)));
    team_barriers[b] = team_pointers[b].data();
  }
  blockDim.x = block;
  gridDim.x = grid;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; t++) {
    threads.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned b = 0; b < grid; b++) {
        blockIdx.x = b;
        kernel();
        barrier.arrive_and_wait();
      }
    });
  }
  for (auto &t : threads) t.join();
}

template <class T> inline T from_double(double x) { return (T)x; }
template <> inline __nv_bfloat16 from_double<__nv_bfloat16>(double x) { return __double2bfloat16(x); }
inline double to_double(float x) { return x; }
inline double to_double(double x) { return x; }
inline double to_double(__half x) { return (double)(float)x; }
inline double to_double(__nv_bfloat16 x) { return __bfloat162float(x); }

// Reads `n` doubles (values) or int64s (indices) from `path` as T.
// (Buffers hold at least one element: an empty vector's data() is null, which
// fread and fwrite must not be given even for no elements.)
template <class T, class File> inline T *read(const char *path, size_t n) {
  std::vector<File> raw(n > 0 ? n : 1);
  FILE *f = std::fopen(path, "rb");
  if (!f || std::fread(raw.data(), sizeof(File), n, f) != n) {
    std::fprintf(stderr, "cannot read %s\n", path);
    std::exit(2);
  }
  std::fclose(f);
  T *out = new T[n > 0 ? n : 1];
  for (size_t i = 0; i < n; i++) out[i] = from_double<T>((double)raw[i]);
  if constexpr (std::is_integral_v<T>) {
    for (size_t i = 0; i < n; i++) out[i] = (T)raw[i];
  }
  return out;
}

template <class T> inline void write(const char *path, const T *data, size_t n) {
  std::vector<double> raw(n > 0 ? n : 1);
  for (size_t i = 0; i < n; i++) raw[i] = to_double(data[i]);
  FILE *f = std::fopen(path, "wb");
  if (!f || std::fwrite(raw.data(), sizeof(double), n, f) != n) {
    std::fprintf(stderr, "cannot write %s\n", path);
    std::exit(2);
  }
  std::fclose(f);
}
}  // namespace emu
