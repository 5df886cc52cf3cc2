// KDA chunk-local backward (training) for sm_90a / sm_100a: bf16 q/k and states, K = V = 128 or 256, 64-token
// chunks.
// The compiled counterpart of triton_kda.intra's `_kda_intra_bwd_kernel` (its docstring has the full math); the C
// entry point kda_intra_bwd is loaded through ctypes.
//
// kda_intra_bwd_kernel  grid (NKP NT, HV), 8 warps: one CTA per chunk, v-head and 64-column part of K (NKP = K / 64
// parts); warp (r, kq) owns the chunk's rows [16 r, 16 r + 16) and 32 of the part's columns (4 mma n-tiles). With
// S = h, dS = dh of the chunk, qn = scale rstd_q q, kn = rstd_k k and G the gate cumsum (log2 units; formed here from
// g while S and dS load: the Triton pipeline's gate-cumsum kernel does not run), per row i and column c:
//     state side   do S^T, X = -dvb S^T, v_new dS^T                  (bf16 mma; dvb as a bf16 hi + lo pair)
//     intra sums   Rq_i = sum_j dAqk_ij kn_j 2^(G_i - G_j),  RL_i likewise with dL,
//                  C_j  = sum_i (dAqk_ij qn_i + dL_ij beta_i kn_i) 2^(G_i - G_j)   (tf32 mma, anchored at the
//                  block's first row a: 2^(G_i - G_j) = 2^(G_i - G_a) 2^(G_a - G_j); a block whose range exceeds
//                  RANGE_MAX sums exactly, term by term; the B operands as tf32 hi + lo pairs but with gate 2)
//     epilogue     dq, dk and dbeta partials per 32 columns of K, as in the Triton kernel, and the gate gradient: its
//                  row terms E and F (the Triton kernel's E-form) meet in shared memory, where each column is scanned,
//                  dgate_m = sum_{i >= m} E_i + sum_{j < m} F_j, and taken through the gate's activation as
//                  triton_kda.gate's `_kda_gate_bwd_kernel` does (dg, and the dA_log / ddt_bias partials).
// Shared memory holds the chunk's S and dS rows of this part, 128 columns at a time (the state side's B operands;
// K = 256 takes two passes, the second staged in place of the first), and its G, q, k, dAqk, dL
// and row scalars (the intra sums' operands; all but G staged while the state side runs); do, v_new and dvb rows
// come straight from global memory into the A fragments. The reduction index of every product is permuted so that
// each lane reads 8 consecutive elements (16 or 32 bytes) at once: A and B use the same permutation, which leaves the
// sums unchanged.
// 128 registers and 104 KiB of shared memory (106 KiB at K = 256, whose S and dS columns are staged in two passes):
// two CTAs (16 warps) per SM.
#include "common.cuh"

// the C ABI's argument block (mirrored by cuda_fast.sm90_bwd.IntraBwdArgs)
struct IntraBwdArgs {
    const __nv_bfloat16* q;        // [TT, H, K]
    const __nv_bfloat16* k;        // [TT, H, K]
    const __nv_bfloat16* g;        // [TT, HV, K] the gate as passed (raw input of the in-kernel gate, or the decay)
    const float* A_log;            // [HV] or null
    const float* dt_bias;          // [HV * K] or null
    const float* gl;               // [NT, HV, K] G at each chunk's last token
    const float* rstd_q;           // [TT, HV]
    const float* rstd_k;           // [TT, HV]
    const float* beta;             // [TT, HV] activated
    const __nv_bfloat16* h;        // [NT, HV, K, V] state at each chunk start
    const __nv_bfloat16* dh;       // [NT, HV, K, V] its gradient
    const __nv_bfloat16* v_new;    // [TT, HV, V]
    const __nv_bfloat16* do_;      // [TT, HV, V]
    const float* dvb;              // [TT, HV, V]
    const float* dAqk;             // [TT, HV, BT]
    const float* dL;               // [TT, HV, BT]
    const int64_t* cu_seqlens;     // [N + 1]
    const int32_t* chunk_indices;  // [NT, 2]: (sequence, chunk within it)
    void* dq;                      // qk_final: [TT, H, K] bf16 w.r.t. q as passed; else [TT, HV, K] fp32 w.r.t. the
    void* dk;                      //   normalised q (k), per v-head
    __nv_bfloat16* dg;             // [TT, HV, K] w.r.t. g
    float* dbeta;                  // [K / 32, TT, HV] beta-gradient partials per 32 columns of K (through w and L)
    float* dA_log_part;            // [K / 64, NT, HV] per 64 columns of K and chunk, or null (exactly when A_log is)
    float* ddt_bias_part;          // [NT, HV, K] per chunk, or null (exactly when dt_bias is)
    int64_t TT, NT, H, HV, K, V, BT;
    float scale;
    float lower_bound;             // gate 2's bound
    int32_t gate;                  // 0: g is the log decay; 1: -exp(A_log) softplus(g + dt_bias); 2: lower-bound form
    int32_t l2norm;                // q and k were l2-normalised in the forward (rstd_q, rstd_k their row norms)
    int32_t qk_final;              // 1 (needs H == HV): dq, dk as the final gradients, l2norm backward included
};

namespace {

constexpr int BT = 64;             // chunk size
constexpr int KH = 64;             // columns per CTA (a part of K)
constexpr int SP = 68;             // row strides (elements) of the staged tiles, chosen for conflict-free
constexpr int SPB = 72;            //   fragment reads: G fp32 [64, SP], q and k bf16 [64, SPB],
constexpr int SPA = 72;            //   dAqk and dL fp32 [64, SPA]
constexpr int WARPS = 8;
constexpr float RANGE_MAX = 110.0f;  // as triton_kda.intra: 2^110 |k| stays far inside the fp32 range
// D = K = V; the NKP = D / KH CTAs of a chunk and v-head each hold row dots of every part (sDot) and VS columns of
// their S and dS rows
constexpr int VS = 128;            // columns of S and dS staged at once (D / VS passes of the state side)
constexpr int smem_bytes(int D) {
    return (BT * SP + 2 * BT * SPA + 3 * BT + 4 * (D / KH) * BT) * 4 + 2 * BT * SPB * 2 + 2 * KH * VS * 2;
}

// S and dS rows in shared memory ([64, VS] bf16, no padding): the 16-byte pieces of odd rows are XOR-swizzled by 4,
// so the 8 lanes of a quarter warp (rows 2m, 2m + 1, four pieces each) hit 32 distinct banks
__device__ __forceinline__ int swz(int row, int piece) { return row * VS + 8 * (piece ^ ((row & 1) << 2)); }

// E and F ([64, 64] fp32, in the space of S and dS once those are read): columns XOR-swizzled by 8 (row & 3), so a
// half warp's float2 stores (four rows, four lanes each) and the column scans' row reads hit distinct banks
__device__ __forceinline__ int swe(int row, int col) { return row * KH + (col ^ ((row & 3) << 3)); }

// y(x, a), the gate activation (triton_kda.gate's `kda_gate_act`) at the biased input x with a = exp(A_log): the exact
// exp, log and division, as the gate cumsum needs (softplus in the log1p form of triton_kda.gate._softplus)
template <int GATE>
__device__ __forceinline__ float gate_act(float x, float a, float lower_bound) {
    if constexpr (GATE == 1) {  // -a softplus(x)
        const float e = expf(fminf(x, 20.0f)), u = 1.0f + e;
        return -a * (x > 20.0f ? x : (u == 1.0f ? e : logf(u) * (e / (u - 1.0f))));
    } else if constexpr (GATE == 2) {  // lower_bound sigmoid(a x)
        return lower_bound / (1.0f + expf(-a * x));
    } else {
        return x;
    }
}

// (dx, da) = dgate (dy/dx, dy/da) of the gate activation y(x, a) (triton_kda.gate's GATE forms) at the biased input
// x, with a = exp(A_log); approximate exp and division (2 ulp), the exact log (the log1p form needs it near u = 1)
template <int GATE>
__device__ __forceinline__ float2 gate_act_bwd(float x, float a, float lower_bound, float dgate) {
    if constexpr (GATE == 1) {  // y = -a softplus(x), softplus as triton_kda.gate._softplus (accurate for tiny e^x)
        const float e = __expf(fminf(x, 20.0f)), u = 1.0f + e;
        const float sp = x > 20.0f ? x : (u == 1.0f ? e : logf(u) * __fdividef(e, u - 1.0f));
        return make_float2(-a * __fdividef(e, u) * dgate, -sp * dgate);  // sigmoid(x) = e / (1 + e)
    } else if constexpr (GATE == 2) {  // y = lower_bound sigmoid(a x)
        const float sg = __fdividef(1.0f, 1.0f + __expf(-a * x)), ds = lower_bound * sg * (1.0f - sg) * dgate;
        return make_float2(ds * a, ds * x);
    } else {
        return make_float2(dgate, 0.0f);
    }
}

// experiment knobs (cuda_fast.build's TRITON_KDA_NVCC_FLAGS, e.g. -DKDA_BWD_MIN_BLOCKS=1); H100 B2 T8192 H32, on the
// kernel before S / dS were staged: MIN_BLOCKS 2 2172 us, 1 2508 us (162 registers), 1 with V_UNROLL 2 2387 us
#ifndef KDA_BWD_MIN_BLOCKS
#define KDA_BWD_MIN_BLOCKS 2  // CTAs per SM the register allocation targets (128 registers, no spills)
#endif
#ifndef KDA_BWD_V_UNROLL
#define KDA_BWD_V_UNROLL 1    // 32-column steps of the state side in flight
#endif
constexpr int V_UNROLL = KDA_BWD_V_UNROLL;

__device__ __forceinline__ uint4 ld16(const void* p, bool ok) {
    return ok ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ float4 ld16f(const float* p, bool ok) {
    return ok ? __ldg(reinterpret_cast<const float4*>(p)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// 8 fp32 values as bf16 pairs: hi = bf16(x), lo = bf16(x - hi) (hi + lo carries 16 mantissa bits)
__device__ __forceinline__ void split_bf16(const float4 x0, const float4 x1, uint32_t hi[4], uint32_t lo[4]) {
    const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        hi[m] = pack_bf16(x[2 * m], x[2 * m + 1]);
        const float2 h = unpack_bf16(hi[m]);
        lo[m] = pack_bf16(x[2 * m] - h.x, x[2 * m + 1] - h.y);
    }
}

// the NKP CTAs of a chunk and v-head (its parts of K) as one cluster: rank = kh
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}

// cluster_sync in two halves: arrive (relaxed: orders no memory) early, wait before the first remote access
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

// stores v into the shared memory of cluster CTA `rank` at this CTA's address p
__device__ __forceinline__ void st_cluster(float* p, uint32_t rank, float v) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(remote), "f"(v) : "memory");
}

// the gate cumsum G of this CTA's part of K ([64, SP] fp32 in sG, log2 units, zero past the sequence end) from the
// raw gate staged in the upper half of sG's rows: G_i = log2(e) sum_{j <= i} gate_j, gate_j = g_j (GATE 0) or the
// activation `gate_act` of g_j + dt_bias. Thread (c, s) of warp w takes column c' = 8 w + c (c = lane & 7), rows
// [16 s, 16 s + 16) (s = lane >> 3), and sums them in order from its segment's offset (the earlier segments' totals,
// by shuffles): G_i - G_j of nearby tokens is right to an ulp or two of |G| (a tree-shaped scan, as tl.cumsum's,
// gives nearby prefix sums independent errors of several).
// Every thread of the CTA calls it (a barrier inside: all raw values are read before G overwrites them); the
// caller's next barrier publishes G.
template <int D, int GATE>
__device__ __forceinline__ void stage_gate_cumsum(const IntraBwdArgs& a, float* sG, int64_t hv, int64_t kh,
                                                  int nvalid, int warp, int lane) {
    const int c = 8 * warp + (lane & 7), s = lane >> 3;
    float y[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        y[i] = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(sG + (16 * s + i) * SP + KH / 2)[c]);
    }
    __syncthreads();
    const float dtb = GATE > 0 && a.dt_bias != nullptr ? a.dt_bias[hv * D + kh * KH + c] : 0.0f;
    const float ea = GATE > 0 && a.A_log != nullptr ? expf(a.A_log[hv]) : 1.0f;
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        if constexpr (GATE > 0) y[i] = gate_act<GATE>(y[i] + dtb, ea, a.lower_bound);
        if (16 * s + i >= nvalid) y[i] = 0.0f;
        total += y[i];
    }
    float incl = total;  // the segments' inclusive totals over s, then this segment's offset
    float up = __shfl_up_sync(0xffffffffu, incl, 8);
    if (s >= 1) incl += up;
    up = __shfl_up_sync(0xffffffffu, incl, 16);
    if (s >= 2) incl += up;
    up = __shfl_up_sync(0xffffffffu, incl, 8);
    float run = s >= 1 ? up : 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const int row = 16 * s + i;
        run += y[i];
        sG[row * SP + c] = row < nvalid ? run * 1.4426950408889634f : 0.0f;
    }
}

// columns [VS pass, VS pass + VS) of this part's S and dS rows (cp.async, the caller commits)
template <int D>
__device__ __forceinline__ void stage_state(const IntraBwdArgs& a, __nv_bfloat16* sS, __nv_bfloat16* sdS,
                                            int64_t state, int pass, int tid) {
    for (int i = tid; i < KH * (VS / 8); i += WARPS * 32) {
        const int row = i / (VS / 8), p = i % (VS / 8);
        const int64_t src = state + row * D + pass * VS + 8 * p;
        cp_async16(sS + swz(row, p), a.h + src, true);
        cp_async16(sdS + swz(row, p), a.dh + src, true);
    }
}

// QK_FINAL (H == HV, launched as clusters of the NKP parts of K): the l2norm backward of q and k in the epilogue,
//     dq = r (d - xh (xh . d)),  xh = r q,  d = the gradient w.r.t. xh  (r = rstd_q; k likewise)
// with each row's dot over all parts: every warp stores its share of its rows in sDot of every CTA of the cluster
// (slots by rank), and all sum them in the same order (rank 0's two warps' shares, then rank 1's, ...), so every
// part uses the same bits
template <int D, int GATE, bool QK_FINAL>
__global__ void __launch_bounds__(WARPS * 32, KDA_BWD_MIN_BLOCKS) kda_intra_bwd_kernel(const IntraBwdArgs a) {
    // the intra sums' B operands go in as tf32 pairs (`tf32_rest`): the gate gradient's cancelling sums amplify
    // their rounding (H100, pre-gated B1 T256 H16 without a state: dg 3.91e-3 -> 2.92e-3, fla 3.78e-3; the kernel
    // +7%, fwd+bwd +2.4%). The lower-bound gate (Kimi's) splits only the columns / rows of the block's own 16 tokens
    // (2026-11-27): its decays per token are >= e^-5, so where the gate is unsaturated (A_log near 0) the cancelling
    // pairs that matter are the nearest ones, and splitting every pair cost fwd+bwd +3.3% on an H200 (B2 T8192 H32)
    constexpr bool SPLIT_ALL = GATE != 2;
    constexpr int NKP = D / KH;  // the CTAs of a chunk and v-head
    // the chunk's rows (zero past the sequence end), this CTA's columns of K
    extern __shared__ __align__(16) float smem[];
    float* sG = smem;                                                 // [64, SP] G
    float* sA = sG + BT * SP;                                         // [64, SPA] dAqk (all 64 columns)
    float* sL = sA + BT * SPA;                                        // [64, SPA] dL
    float* sRq = sL + BT * SPA;                                       // [64] scale rstd_q
    float* sRk = sRq + BT;                                            // [64] rstd_k
    float* sB = sRk + BT;                                             // [64] beta
    float* sDot = sB + BT;                                            // [NKP (rank), 2 (q, k), 2 (kq), 64] dots
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(sDot + 4 * NKP * BT);  // [64, SPB] q
    __nv_bfloat16* sK = sQ + BT * SPB;                                          // [64, SPB] k
    __nv_bfloat16* sS = sK + BT * SPB;                                // [64, VS] S rows of this part (swz)
    __nv_bfloat16* sdS = sS + KH * VS;                                // [64, VS] dS rows
    auto qn = [&](int i, int c) { return __bfloat162float(sQ[i * SPB + c]) * sRq[i]; };
    auto kn = [&](int i, int c) { return __bfloat162float(sK[i * SPB + c]) * sRk[i]; };
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gi = lane >> 2, ti = lane & 3;
    const int64_t ci = blockIdx.x / NKP, kh = blockIdx.x % NKP, hv = blockIdx.y;  // the parts run side by side
    const int64_t HV = a.HV, h = hv / (HV / a.H);
    const int64_t seq = a.chunk_indices[2 * ci], bos = a.cu_seqlens[seq];
    const int64_t t0 = bos + BT * static_cast<int64_t>(a.chunk_indices[2 * ci + 1]);  // the chunk's first token
    const int nvalid = static_cast<int>(min(static_cast<int64_t>(BT), a.cu_seqlens[seq + 1] - t0));

    if constexpr (QK_FINAL) cluster_arrive_relaxed();  // waited for before the first store to the other CTA

    // 1. stage the raw gate (first group), S and dS (second), then dAqk, dL, q and k of the chunk (third: they land
    //    while the gate cumsum and the state side run), and the rows' scalars
    const int64_t state = (ci * HV + hv) * D * D + kh * KH * D;
    for (int i = tid; i < BT * 8; i += WARPS * 32) {  // the raw gate of this part, in the upper half of G's rows
        const int row = i / 8, p = i % 8;
        const bool ok = row < nvalid;
        cp_async16(sG + row * SP + KH / 2 + 4 * p, a.g + ((t0 + (ok ? row : 0)) * HV + hv) * D + kh * KH + 8 * p, ok);
    }
    cp_async_commit();
    stage_state<D>(a, sS, sdS, state, 0, tid);
    cp_async_commit();
    for (int i = tid; i < BT * 16; i += WARPS * 32) {  // 16-byte pieces: 16 per row of dAqk, dL; 8 of q, k
        const int row = i / 16, p = i % 16;
        const bool ok = row < nvalid;
        const int64_t tok = t0 + (ok ? row : 0);
        cp_async16(sA + row * SPA + 4 * p, a.dAqk + (tok * HV + hv) * BT + 4 * p, ok);
        cp_async16(sL + row * SPA + 4 * p, a.dL + (tok * HV + hv) * BT + 4 * p, ok);
        if (p < 8) cp_async16(sQ + row * SPB + 8 * p, a.q + (tok * a.H + h) * D + kh * KH + 8 * p, ok);
        else cp_async16(sK + row * SPB + 8 * (p - 8), a.k + (tok * a.H + h) * D + kh * KH + 8 * (p - 8), ok);
    }
    cp_async_commit();
    if (tid < BT) {
        const bool ok = tid < nvalid;
        const int64_t p = (t0 + (ok ? tid : 0)) * HV + hv;
        sRq[tid] = ok ? a.rstd_q[p] * a.scale : 0.0f;
        sRk[tid] = ok ? a.rstd_k[p] : 0.0f;
        sB[tid] = ok ? a.beta[p] : 0.0f;
    }

    const int r = warp & 3, kq = warp >> 2;
    const int ra = r * 16;                     // the block's first row: the anchor
    const int row0 = ra + gi, row1 = ra + gi + 8;
    const bool ok0 = row0 < nvalid, ok1 = row1 < nvalid;
    const bool active = ra < nvalid;           // warp-uniform: blocks past the sequence end write nothing
    const int c0 = kq * 32;                    // the warp's first column within the CTA's part

    // 2. state side: dqg = do S^T, X = dvb S^T (negated below), dkg = v_new dS^T, over the passes of VS columns of V
    float dqg[4][4] = {}, xs[4][4] = {}, dkg[4][4] = {};
    cp_async_wait<2>();
    __syncthreads();
    stage_gate_cumsum<D, GATE>(a, sG, hv, kh, nvalid, warp, lane);  // while S and dS land
    cp_async_wait<1>();
    __syncthreads();
    float sds[4] = {};  // rowsum(S dS) of column c0 + 8 n + gi, for the block that holds the chunk's last row
    const bool last = active && nvalid - 1 - ra < 16;
#pragma unroll
    for (int pass = 0; pass < D / VS; ++pass) {
        if (pass > 0) {  // the next VS columns of S and dS in place of the last ones
            __syncthreads();
            stage_state<D>(a, sS, sdS, state, pass, tid);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        }
        if (active) {
            const int64_t p0 = ((t0 + (ok0 ? row0 : 0)) * HV + hv) * D + pass * VS + 8 * ti;
            const int64_t p1 = ((t0 + (ok1 ? row1 : 0)) * HV + hv) * D + pass * VS + 8 * ti;
#pragma unroll V_UNROLL
            for (int v0 = 0; v0 < VS; v0 += 32) {
                // lane (gi, ti) holds columns v0 + 8 ti .. + 7: k-step s takes the pairs 4 s + {0, 1} and 4 s + {2, 3}
                const uint4 fd0 = ld16(a.do_ + p0 + v0, ok0), fd1 = ld16(a.do_ + p1 + v0, ok1);
                const uint4 fv0 = ld16(a.v_new + p0 + v0, ok0), fv1 = ld16(a.v_new + p1 + v0, ok1);
                uint32_t hi0[4], lo0[4], hi1[4], lo1[4];
                split_bf16(ld16f(a.dvb + p0 + v0, ok0), ld16f(a.dvb + p0 + v0 + 4, ok0), hi0, lo0);
                split_bf16(ld16f(a.dvb + p1 + v0, ok1), ld16f(a.dvb + p1 + v0 + 4, ok1), hi1, lo1);
                const uint32_t ad[2][4] = {{fd0.x, fd1.x, fd0.y, fd1.y}, {fd0.z, fd1.z, fd0.w, fd1.w}};
                const uint32_t av[2][4] = {{fv0.x, fv1.x, fv0.y, fv1.y}, {fv0.z, fv1.z, fv0.w, fv1.w}};
                const uint32_t ah[2][4] = {{hi0[0], hi1[0], hi0[1], hi1[1]}, {hi0[2], hi1[2], hi0[3], hi1[3]}};
                const uint32_t al[2][4] = {{lo0[0], lo1[0], lo0[1], lo1[1]}, {lo0[2], lo1[2], lo0[3], lo1[3]}};
#pragma unroll
                for (int n = 0; n < 4; ++n) {
                    const int off = swz(c0 + 8 * n + gi, v0 / 8 + ti);
                    const uint4 s = *reinterpret_cast<const uint4*>(sS + off);
                    const uint4 ds = *reinterpret_cast<const uint4*>(sdS + off);
                    mma(dqg[n], ad[0], s.x, s.y);
                    mma(dqg[n], ad[1], s.z, s.w);
                    mma(xs[n], ah[0], s.x, s.y);
                    mma(xs[n], ah[1], s.z, s.w);
                    mma(xs[n], al[0], s.x, s.y);
                    mma(xs[n], al[1], s.z, s.w);
                    mma(dkg[n], av[0], ds.x, ds.y);
                    mma(dkg[n], av[1], ds.z, ds.w);
                }
            }
        }
        if (last) {
#pragma unroll
            for (int n = 0; n < 4; ++n) {
#pragma unroll
                for (int p = ti; p < VS / 8; p += 4) {
                    const int off = swz(c0 + 8 * n + gi, p);
                    const uint4 x4 = *reinterpret_cast<const uint4*>(sS + off);
                    const uint4 y4 = *reinterpret_cast<const uint4*>(sdS + off);
                    const uint32_t ux[4] = {x4.x, x4.y, x4.z, x4.w}, uy[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
                    for (int m = 0; m < 4; ++m) {
                        const float2 x = unpack_bf16(ux[m]), y = unpack_bf16(uy[m]);
                        sds[n] += x.x * y.x + x.y * y.y;
                    }
                }
            }
        }
    }
    if (last) {
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            sds[n] += __shfl_xor_sync(0xffffffffu, sds[n], 1);
            sds[n] += __shfl_xor_sync(0xffffffffu, sds[n], 2);
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    __syncthreads();  // S and dS are read: their space takes E and F
    float* sE = reinterpret_cast<float*>(sS);
    float* sF = reinterpret_cast<float*>(sdS);
    if (!active) return;  // blocks past the sequence end: step 6 syncs the others with a named barrier
    // 3. the state side's terms, folded in place: dqg -> dqn = do S^T 2^G, xs -> dkn = X beta 2^G + kgl,
    //    dkg -> E = kn X beta 2^G (+ the state decay's term on the chunk's last row); F is final here
    //    (accumulator element e of n-tile n: row e < 2 ? row0 : row1, column c0 + 8 n + 2 ti + (e & 1))
    const int64_t gbase = (ci * HV + hv) * D + kh * KH;
    float db[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 4; ++n) {
        const int colb = c0 + 8 * n + 2 * ti;
        const float2 Gl = *reinterpret_cast<const float2*>(a.gl + gbase + colb);
        // rowsum(S dS) of this lane's two columns (held by the lanes of row gi = 2 ti, 2 ti + 1)
        const float sd[2] = {__shfl_sync(0xffffffffu, sds[n], (2 * ti) * 4),
                             __shfl_sync(0xffffffffu, sds[n], (2 * ti + 1) * 4)};
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int row = hr == 0 ? row0 : row1;
            const bool ok = row < nvalid;
            float vF[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int x = 2 * hr + e, col = colb + e;
                const float Gr = sG[row * SP + col], knr = kn(row, col), br = sB[row];
                const float gl = e == 0 ? Gl.x : Gl.y;
                const float eG = ok ? fast_exp2(Gr) : 0.0f, eGl = ok ? fast_exp2(gl - Gr) : 0.0f;
                const float XeG = -xs[n][x] * eG;
                const float dkgl = dkg[n][x] * eGl;
                dqg[n][x] *= eG;
                xs[n][x] = XeG * br + dkgl;
                dkg[n][x] = knr * XeG * br + (row == nvalid - 1 ? sd[e] * fast_exp2(gl) : 0.0f);
                db[hr] += knr * XeG;
                vF[e] = dkgl * knr;
            }
            *reinterpret_cast<float2*>(sF + swe(row, colb)) = make_float2(vF[0], vF[1]);
        }
    }
    float (&dqn)[4][4] = dqg;
    float (&dkn)[4][4] = xs;
    float (&dE)[4][4] = dkg;

    // 4. the intra-chunk sums; the block's gate range decides between the anchored products and exact sums
    float range = 0.0f;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = e < 2 ? row0 : row1, col = c0 + 8 * n + 2 * ti + (e & 1);
            if (row < nvalid) range = fmaxf(range, sG[ra * SP + col] - sG[row * SP + col]);
        }
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) range = fmaxf(range, __shfl_xor_sync(0xffffffffu, range, m));

    if (range > RANGE_MAX) {
        // exact: every term with its own factor 2^min(G_i - G_j, 0) (strong decays underflow to 0, never overflow)
#pragma unroll
        for (int n = 0; n < 4; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = e < 2 ? row0 : row1, col = c0 + 8 * n + 2 * ti + (e & 1);
                if (i >= nvalid) continue;
                const float Gi = sG[i * SP + col], knr = kn(i, col), br = sB[i];
                float sq = 0.0f, sl = 0.0f, sc = 0.0f;
                for (int j = 0; j <= i; ++j) {
                    const float x = kn(j, col) * fast_exp2(fminf(Gi - sG[j * SP + col], 0.0f));
                    sq += sA[i * SPA + j] * x;
                    sl += sL[i * SPA + j] * x;
                }
                for (int i2 = i; i2 < nvalid; ++i2) {
                    const float f = fast_exp2(fminf(sG[i2 * SP + col] - Gi, 0.0f));
                    sc += (sA[i2 * SPA + i] * qn(i2, col) + sL[i2 * SPA + i] * sB[i2] * kn(i2, col)) * f;
                }
                dqn[n][e] += sq;
                dkn[n][e] += sl * br + sc;
                dE[n][e] += knr * (sl * br - sc);
                db[e >> 1] += knr * sl;
            }
        }
    } else {
        float Ga[4];  // G at the anchor, column c0 + 8 n + gi (the B fragments' column)
#pragma unroll
        for (int n = 0; n < 4; ++n) Ga[n] = sG[ra * SP + c0 + 8 * n + gi];
        {
            // rows: Rq, RL = dAqk / dL rows (A, k index j) x kn_j 2^(G_a - G_j) (B), columns j < 16 (r + 1)
            float rq[4][4] = {}, rl[4][4] = {};
            for (int j0 = 0; j0 < ra + 16; j0 += 8) {
                // lane ti holds columns j0 + 2 ti (k = ti) and j0 + 2 ti + 1 (k = ti + 4); staged rows past the
                // sequence end are zero
                const float2 x0 = *reinterpret_cast<const float2*>(sA + row0 * SPA + j0 + 2 * ti);
                const float2 x1 = *reinterpret_cast<const float2*>(sA + row1 * SPA + j0 + 2 * ti);
                const float2 y0 = *reinterpret_cast<const float2*>(sL + row0 * SPA + j0 + 2 * ti);
                const float2 y1 = *reinterpret_cast<const float2*>(sL + row1 * SPA + j0 + 2 * ti);
                const uint32_t fa[4] = {tf32(x0.x), tf32(x1.x), tf32(x0.y), tf32(x1.y)};
                const uint32_t fl[4] = {tf32(y0.x), tf32(y1.x), tf32(y0.y), tf32(y1.y)};
                const int j = j0 + 2 * ti;
#pragma unroll
                for (int n = 0; n < 4; ++n) {
                    const int col = c0 + 8 * n + gi;
                    const float x0b = kn(j, col) * fast_exp2(fminf(Ga[n] - sG[j * SP + col], RANGE_MAX));
                    const float x1b = kn(j + 1, col) * fast_exp2(fminf(Ga[n] - sG[(j + 1) * SP + col], RANGE_MAX));
                    const uint32_t b0 = tf32(x0b), b1 = tf32(x1b);
                    mma_tf32(rq[n], fa, b0, b1);
                    mma_tf32(rl[n], fl, b0, b1);
                    if (SPLIT_ALL || j0 >= ra) {
                        const uint32_t l0 = tf32_rest(x0b, b0), l1 = tf32_rest(x1b, b1);
                        mma_tf32(rq[n], fa, l0, l1);
                        mma_tf32(rl[n], fl, l0, l1);
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < 4; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {  // the rows' factor 2^(G_i - G_a)
                    const int row = e < 2 ? row0 : row1, col = c0 + 8 * n + 2 * ti + (e & 1);
                    const float eA = row < nvalid ? fast_exp2(sG[row * SP + col] - sG[ra * SP + col]) : 0.0f;
                    const float knr = kn(row, col), RL = rl[n][e] * eA, RLb = RL * sB[row];
                    dqn[n][e] += rq[n][e] * eA;
                    dkn[n][e] += RLb;
                    dE[n][e] += knr * RLb;
                    db[e >> 1] += knr * RL;
                }
            }
        }
        // columns: C = dAqk^T / dL^T (A: rows j of the block, k index i >= a) x (qn, beta kn) 2^(G_i - G_a) (B)
        float cc[4][4] = {};
        for (int i0 = ra; i0 < nvalid; i0 += 8) {
            const int i = i0 + 2 * ti;  // lane ti holds rows i (k = ti) and i + 1 (k = ti + 4)
            const int q0 = i * SPA + ra + gi, q1 = q0 + SPA;
            const uint32_t fa[4] = {tf32(sA[q0]), tf32(sA[q0 + 8]), tf32(sA[q1]), tf32(sA[q1 + 8])};
            const uint32_t fl[4] = {tf32(sL[q0]), tf32(sL[q0 + 8]), tf32(sL[q1]), tf32(sL[q1 + 8])};
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const int col = c0 + 8 * n + gi;
                const float f0 = fast_exp2(fminf(sG[i * SP + col] - Ga[n], RANGE_MAX));
                const float f1 = fast_exp2(fminf(sG[(i + 1) * SP + col] - Ga[n], RANGE_MAX));
                const float q0b = qn(i, col) * f0, q1b = qn(i + 1, col) * f1;
                const float k0b = kn(i, col) * sB[i] * f0, k1b = kn(i + 1, col) * sB[i + 1] * f1;
                const uint32_t hq0 = tf32(q0b), hq1 = tf32(q1b), hk0 = tf32(k0b), hk1 = tf32(k1b);
                mma_tf32(cc[n], fa, hq0, hq1);
                mma_tf32(cc[n], fl, hk0, hk1);
                if (SPLIT_ALL || i0 < ra + 16) {
                    mma_tf32(cc[n], fa, tf32_rest(q0b, hq0), tf32_rest(q1b, hq1));
                    mma_tf32(cc[n], fl, tf32_rest(k0b, hk0), tf32_rest(k1b, hk1));
                }
            }
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {  // the columns' factor 2^(G_a - G_j)
                const int row = e < 2 ? row0 : row1, col = c0 + 8 * n + 2 * ti + (e & 1);
                const float d = sG[ra * SP + col] - sG[row * SP + col];
                const float C = row < nvalid ? cc[n][e] * fast_exp2(fminf(d, RANGE_MAX)) : 0.0f;
                dkn[n][e] += C;
                dE[n][e] -= kn(row, col) * C;
            }
        }
    }

    // 5. stores: dq, dk, E (to shared memory) and the dbeta partial of this warp's 32 columns of K
    float dotq[2] = {0.0f, 0.0f}, dotk[2] = {0.0f, 0.0f};  // QK_FINAL: rows row0, row1 of xh . d over the warp's
                                                           // columns
#pragma unroll
    for (int n = 0; n < 4; ++n) {
        const int colb = c0 + 8 * n + 2 * ti;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int row = hr == 0 ? row0 : row1;
            if (row >= nvalid) continue;
            const int x = 2 * hr;
            const float tq0 = qn(row, colb) * dqn[n][x], tq1 = qn(row, colb + 1) * dqn[n][x + 1];
            *reinterpret_cast<float2*>(sE + swe(row, colb)) = make_float2(dE[n][x] + tq0, dE[n][x + 1] + tq1);
            if constexpr (QK_FINAL) {
                dotq[hr] += tq0 + tq1;
                dotk[hr] += kn(row, colb) * dkn[n][x] + kn(row, colb + 1) * dkn[n][x + 1];
            } else {
                const int64_t out = ((t0 + row) * HV + hv) * D + kh * KH + colb;
                float* dq = static_cast<float*>(a.dq);
                float* dk = static_cast<float*>(a.dk);
                *reinterpret_cast<float2*>(dq + out) = make_float2(dqn[n][x] * a.scale, dqn[n][x + 1] * a.scale);
                *reinterpret_cast<float2*>(dk + out) = make_float2(dkn[n][x], dkn[n][x + 1]);
            }
        }
    }
    if constexpr (QK_FINAL) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            dotq[hr] += __shfl_xor_sync(0xffffffffu, dotq[hr], 1);
            dotq[hr] += __shfl_xor_sync(0xffffffffu, dotq[hr], 2);
            dotk[hr] += __shfl_xor_sync(0xffffffffu, dotk[hr], 1);
            dotk[hr] += __shfl_xor_sync(0xffffffffu, dotk[hr], 2);
        }
        cluster_wait();  // the other CTAs have started (their shared memory exists)
        if (ti == 0) {
            const float part[4] = {dotq[0], dotq[1], dotk[0], dotk[1]};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float* p = sDot + ((2 * kh + (j >> 1)) * 2 + kq) * BT + (j & 1 ? row1 : row0);
                *p = part[j];
#pragma unroll
                for (int o = 1; o < NKP; ++o) st_cluster(p, static_cast<uint32_t>((kh + o) % NKP), part[j]);
            }
        }
        cluster_sync();  // every CTA's row dots are in place (blocks past the sequence end have left in all)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int row = hr == 0 ? row0 : row1;
            float tot[2] = {0.0f, 0.0f};  // (xh . d) of q and of k over all of K: rank 0's shares, then rank 1's, ...
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const float* p = sDot + 2 * t * BT + row;
#pragma unroll
                for (int rk = 0; rk < NKP; ++rk) tot[t] += p[4 * BT * rk] + p[4 * BT * rk + BT];
            }
            if (row >= nvalid) continue;
            const float rq = a.l2norm ? sRq[row] / a.scale : 1.0f, rk = a.l2norm ? sRk[row] : 1.0f;
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const int colb = c0 + 8 * n + 2 * ti, x = 2 * hr;
                float vq[2], vk[2];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float q = __bfloat162float(sQ[row * SPB + colb + e]);
                    const float k = __bfloat162float(sK[row * SPB + colb + e]);
                    const float dq = dqn[n][x + e] * a.scale, dk = dkn[n][x + e];
                    vq[e] = a.l2norm ? rq * (dq - q * rq * tot[0]) : dq;
                    vk[e] = a.l2norm ? rk * (dk - k * rk * tot[1]) : dk;
                }
                // in place of this thread's own q and k (read above, by no one after): stored whole rows below
                *reinterpret_cast<uint32_t*>(sQ + row * SPB + colb) = pack_bf16(vq[0], vq[1]);
                *reinterpret_cast<uint32_t*>(sK + row * SPB + colb) = pack_bf16(vk[0], vk[1]);
            }
        }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        db[hr] += __shfl_xor_sync(0xffffffffu, db[hr], 1);
        db[hr] += __shfl_xor_sync(0xffffffffu, db[hr], 2);
    }
    const int64_t slice = kh * 2 + kq;  // the warp's 32 columns of K
    if (ti == 0 && ok0) a.dbeta[(slice * a.TT + t0 + row0) * HV + hv] = db[0];
    if (ti == 0 && ok1) a.dbeta[(slice * a.TT + t0 + row1) * HV + hv] = db[1];

    // 6. the gate gradient of this part of K: the warps of row block r take its rows, thread (r, c) column c. Each sum
    //    runs in a fixed order (block totals, then the block's rows), so reruns are bit-identical.
    const int nblk = (nvalid + 15) / 16, nthreads = 64 * nblk;  // the row blocks still here, and their threads
    const int c = lane + 32 * kq, s = r;
    const int m0 = ra, m1 = min(m0 + 16, nvalid);
    const int64_t col = kh * KH + c;
    float gx[16];  // the biased gate input x = g + dt_bias of the block's rows (loaded before the barriers)
    const float dtb = a.dt_bias != nullptr ? a.dt_bias[hv * D + col] : 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const bool ok = GATE > 0 && m0 + i < m1;
        gx[i] = ok ? __bfloat162float(a.g[((t0 + m0 + i) * HV + hv) * D + col]) + dtb : 0.0f;
    }
    const float ea = a.A_log != nullptr ? expf(a.A_log[hv]) : 1.0f;
    bar_sync(1, nthreads);  // E and F are complete; G, dAqk and dL are no longer read
    if constexpr (QK_FINAL) {  // dq and dk rows of this part from shared memory, 16 bytes per thread and piece
        for (int i = (kq * nblk + r) * 32 + lane; i < nvalid * 16; i += nthreads) {
            const int row = i >> 4, p = i & 7;
            const int64_t out = ((t0 + row) * a.H + h) * D + kh * KH + 8 * p;
            __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(i & 8 ? a.dk : a.dq) + out;
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>((i & 8 ? sK : sQ) + row * SPB + 8 * p);
        }
    }
    float* sTot = sA;  // [2, 4, 64]: each row block's sums of E and of F
    {
        float se = 0.0f, sf = 0.0f;
        for (int m = m0; m < m1; ++m) {
            se += sE[swe(m, c)];
            sf += sF[swe(m, c)];
        }
        sTot[s * KH + c] = se;
        sTot[(4 + s) * KH + c] = sf;
    }
    bar_sync(1, nthreads);
    float runE = 0.0f, runF = 0.0f;  // E of the later blocks, F of the earlier ones
    for (int s2 = nblk - 1; s2 > s; --s2) runE += sTot[s2 * KH + c];
    for (int s2 = 0; s2 < s; ++s2) runF += sTot[(4 + s2) * KH + c];
    float sufE[16];  // sum_{i >= m} E_i
#pragma unroll
    for (int i = 15; i >= 0; --i) {
        if (m0 + i < m1) runE += sE[swe(m0 + i, c)];
        sufE[i] = runE;
    }
    float dsum = 0.0f, dasum = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        if (m0 + i < m1) {
            const float dy = sufE[i] + runF;  // dgate of row m0 + i
            runF += sF[swe(m0 + i, c)];
            const float2 d = gate_act_bwd<GATE>(gx[i], ea, a.lower_bound, dy);
            a.dg[((t0 + m0 + i) * HV + hv) * D + col] = __float2bfloat16_rn(d.x);
            dsum += d.x;
            dasum += d.y;
        }
    }
    // the partials: ddt_bias per column (sum of dg over the chunk's rows), dA_log per CTA (sum of dgate dy/da, times a)
    float* sRed = sL;  // [4, 64] column sums per row block, then [8] per warp
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) dasum += __shfl_xor_sync(0xffffffffu, dasum, m);
    sRed[s * KH + c] = dsum;
    if (lane == 0) sRed[4 * KH + warp] = dasum;
    bar_sync(1, nthreads);
    if (a.ddt_bias_part != nullptr && r == 0) {
        float t = 0.0f;
        for (int s2 = 0; s2 < nblk; ++s2) t += sRed[s2 * KH + c];
        a.ddt_bias_part[(ci * HV + hv) * D + col] = t;
    }
    if (a.dA_log_part != nullptr && tid == 0) {
        float t = 0.0f;
        for (int s2 = 0; s2 < nblk; ++s2) t += sRed[4 * KH + s2] + sRed[4 * KH + s2 + 4];
        a.dA_log_part[(kh * a.NT + ci) * HV + hv] = t * ea;
    }
}

}  // namespace

// host side: validation (nothing reaches the kernel unless every pointer is aligned memory of the current device and
// the sizes are the ones it is built for), then the launch on the caller's stream

extern "C" int kda_intra_bwd_args_size() { return static_cast<int>(sizeof(IntraBwdArgs)); }

extern "C" int kda_intra_bwd(const IntraBwdArgs* args, void* stream, char* err, int errlen) {
    if (args == nullptr) return fail(err, errlen, "kda_intra_bwd: args is null");
    const IntraBwdArgs& a = *args;
    char msg[512];
    if (a.K != a.V || (a.K != 128 && a.K != 256) || a.BT != BT) {
        snprintf(msg, sizeof msg, "kda_intra_bwd: needs K = V = 128 or 256 and BT = %d, got K=%lld V=%lld BT=%lld", BT,
                 (long long)a.K, (long long)a.V, (long long)a.BT);
        return fail(err, errlen, msg);
    }
    if (a.TT < 0 || a.NT < 0 || a.H < 1 || a.HV < a.H || a.HV % a.H != 0 || a.HV > 65535 || a.NT > 0x1fffffffLL) {
        snprintf(msg, sizeof msg, "kda_intra_bwd: bad sizes TT=%lld NT=%lld H=%lld HV=%lld (need H >= 1, HV a "
                 "multiple of H, HV <= 65535, NT < 2^29)", (long long)a.TT, (long long)a.NT, (long long)a.H,
                 (long long)a.HV);
        return fail(err, errlen, msg);
    }
    if (a.qk_final && a.H != a.HV) {
        snprintf(msg, sizeof msg, "kda_intra_bwd: qk_final needs H == HV (no GVA group to sum), got H=%lld HV=%lld",
                 (long long)a.H, (long long)a.HV);
        return fail(err, errlen, msg);
    }
    if (a.gate < 0 || a.gate > 2 || (a.gate == 0 && (a.A_log != nullptr || a.dt_bias != nullptr)) ||
        (a.A_log == nullptr) != (a.dA_log_part == nullptr) || (a.dt_bias == nullptr) != (a.ddt_bias_part == nullptr)) {
        snprintf(msg, sizeof msg, "kda_intra_bwd: bad gate arguments: gate=%d (0, 1 or 2; A_log and dt_bias only with "
                 "1 or 2), A_log %s, dA_log_part %s, dt_bias %s, ddt_bias_part %s (each partial exactly with its "
                 "parameter)", a.gate, a.A_log ? "set" : "null", a.dA_log_part ? "set" : "null",
                 a.dt_bias ? "set" : "null", a.ddt_bias_part ? "set" : "null");
        return fail(err, errlen, msg);
    }
    if (a.NT == 0) return 0;
    const Ptr ptrs[] = {
        {a.q, "q", 16, true}, {a.k, "k", 16, true}, {a.g, "g", 16, true}, {a.A_log, "A_log", 4, false},
        {a.dt_bias, "dt_bias", 4, false}, {a.gl, "gl", 8, true},
        {a.rstd_q, "rstd_q", 4, true}, {a.rstd_k, "rstd_k", 4, true}, {a.beta, "beta", 4, true},
        {a.h, "h", 16, true}, {a.dh, "dh", 16, true}, {a.v_new, "v_new", 16, true}, {a.do_, "do", 16, true},
        {a.dvb, "dvb", 16, true}, {a.dAqk, "dAqk", 8, true}, {a.dL, "dL", 8, true},
        {a.cu_seqlens, "cu_seqlens", 8, true}, {a.chunk_indices, "chunk_indices", 8, true},
        {a.dq, "dq", a.qk_final ? 4 : 8, true}, {a.dk, "dk", a.qk_final ? 4 : 8, true}, {a.dg, "dg", 2, true},
        {a.dbeta, "dbeta", 4, true},
        {a.dA_log_part, "dA_log_part", 4, false}, {a.ddt_bias_part, "ddt_bias_part", 4, false},
    };
    if (check_pointers("kda_intra_bwd", ptrs, sizeof ptrs / sizeof ptrs[0], err, errlen) != 0) return 1;
    using Kernel = void (*)(IntraBwdArgs);
    const Kernel kernels[2][2][3] = {  // [K = 128, 256][qk_final][gate]
        {{kda_intra_bwd_kernel<128, 0, false>, kda_intra_bwd_kernel<128, 1, false>,
          kda_intra_bwd_kernel<128, 2, false>},
         {kda_intra_bwd_kernel<128, 0, true>, kda_intra_bwd_kernel<128, 1, true>, kda_intra_bwd_kernel<128, 2, true>}},
        {{kda_intra_bwd_kernel<256, 0, false>, kda_intra_bwd_kernel<256, 1, false>,
          kda_intra_bwd_kernel<256, 2, false>},
         {kda_intra_bwd_kernel<256, 0, true>, kda_intra_bwd_kernel<256, 1, true>, kda_intra_bwd_kernel<256, 2, true>}}};
    const Kernel kernel = kernels[a.K == 256 ? 1 : 0][a.qk_final ? 1 : 0][a.gate];
    const int nkp = static_cast<int>(a.K / KH), smem = smem_bytes(static_cast<int>(a.K));
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) {  // two CTAs per SM (K = 128) need the largest shared-memory carveout
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    }
    if (e == cudaSuccess) {
        cudaLaunchAttribute cluster;  // qk_final: the parts of K of a chunk and v-head as one cluster
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim.x = nkp;
        cluster.val.clusterDim.y = 1;
        cluster.val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(static_cast<unsigned>(nkp * a.NT), static_cast<unsigned>(a.HV));
        cfg.blockDim = dim3(WARPS * 32);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = static_cast<cudaStream_t>(stream);
        cfg.attrs = &cluster;
        cfg.numAttrs = a.qk_final ? 1 : 0;
        e = cudaLaunchKernelEx(&cfg, kernel, a);
    }
    if (e != cudaSuccess) {
        snprintf(msg, sizeof msg, "kda_intra_bwd: launch: %s", cudaGetErrorString(e));
        return fail(err, errlen, msg);
    }
    return 0;
}
