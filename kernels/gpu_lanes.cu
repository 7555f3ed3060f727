// gpu_lanes.cu: a mixer core stepped on the GPU with its state (or KV cache) resident there
// (gpu_lanes.h). The delta family runs a batch of n tokens as one launch of the recurrence
// (delta_steps.cuh, the model stepper's kernel: each block keeps its slice of the state in
// registers over the n tokens) plus, with probes, one launch that turns its column sums into
// every token's probes; the other cores use gpu_mixer_run's GPU_STEP kernels in fp32
// (gpu_mixers.cu, delta_probes.cu) token by token. What changes is where the state lives and who
// owns the buffers. gpu_lane_init allocates
// everything for max_batch tokens (device buffers and pinned host staging); gpu_lane_step packs
// the tokens' inputs into the staging buffer, copies them up in one transfer, launches, and copies
// the outputs and probes down in one transfer. The launches of a batch are captured once as a CUDA
// graph per batch size (and with / without probes) on the lane's own stream, and replayed.
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../mixers/kata.h"
#include "gpu.h"
#include "delta_steps.cuh"
#include "gpu_common.cuh"
#include "step_kernels.cuh"
#include "gpu_lanes.h"

// The delta family's probe names in GDP_* order (as delta_probes.cu lays them out).
static const char *const LANE_GDP_NAMES[GDP_COUNT] = {
    "beta",        "eta",        "rho",        "k_norm",     "q_norm",         "g",
    "alpha",       "half_life",  "e_norm",     "e_rel",      "r_norm",         "r_check",
    "loss_before", "loss_after", "write_norm", "state_norm", "forget_removed", "erase_removed",
    "o_norm"};

enum { LK_DELTA, LK_LD, LK_KALMAN, LK_KATA, LK_KATA_DELTA, LK_ATTN };
enum { LANE_MAX_PROBES = 64 };

// One captured batch: the graph of the launches for n tokens, and the input offsets it was
// captured with (a batch whose inputs lie elsewhere in L->in is captured again).
struct lane_graph {
    cudaGraphExec_t exec;
    size_t sig[IN_COUNT];
};

struct gpu_lane {
    const mixer_ops *m;
    mixer_cfg c;
    int kind, max_batch;
    int kacz, has_g, per_key, plx, prior;
    size_t ns;                    // state floats
    size_t np;                    // the mixer's probe floats a token
    size_t npd;                   // probe floats a token on the device (delta: H * GDP_COUNT)
    size_t in_tok;                // input floats a token, every input the mixer reads
    size_t in_w[IN_COUNT];        // floats a token of each input (0: not read)
    int map[LANE_MAX_PROBES];     // delta: GDP index of the mixer's probe i, or -1
    size_t poff[LANE_MAX_PROBES]; // delta: offset of probe i in the mixer's layout
    int pw[LANE_MAX_PROBES];      // delta: its floats per head
    // device
    float *state, *in, *out, *acc, *k2, *v2, *qr, *rr, *a, *p;
    float *nq2, *nk2, *beff; // delta: |q|^2, |k|^2, the write strength [max_batch, H]
    double *part;            // delta: the recurrence's column sums [max_batch, H, nblk, GM_NACC]
    gm_probe_map pm;         // delta: the probes in GDP layout
    void *scratch;
    void *cscratch; // DeltaKATA: the chunked form's (batches without probes)
    // pinned host staging
    float *h_in, *h_out;
    // KV cache slots written since the last transfer of the state: [dirty_lo, dirty_hi)
    int dirty_lo, dirty_hi;
    size_t bytes, up, down;
    cudaStream_t st;   // every copy and launch of a step (blocking: ordered with cudaMemcpy)
    int graphs;        // 1: batches run as captured graphs
    lane_graph *gr;    // [2][max_batch + 1]: without / with probes, by n
    cudaEvent_t ev[2]; // around a step: before its copy up, after its copy down
    gpu_lane_stats stats;
    // the step gpu_lane_begin started: n tokens asked, nv run on the device (attention: those
    // inside the cache), probes or not
    int pending, pend_n, pend_nv, pend_probes;
};

static double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1e3 + (t1.tv_nsec - t0->tv_nsec) * 1e-6;
}

static int name_is(const mixer_ops *m, const char *a) {
    return !strcmp(m->name, a);
}

static int lane_alloc(gpu_lane *L, void *pp, size_t bytes, err *e) {
    void **p = (void **)pp;
    *p = NULL;
    cudaError_t rc = cudaMalloc(p, bytes ? bytes : 1);
    if (rc != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return err_set(e, "gpu lane %s: cannot allocate %zu bytes on the device: %s", L->m->name,
                       bytes, cudaGetErrorString(rc));
    }
    L->bytes += bytes;
    return 0;
}

static int host_alloc(gpu_lane *L, void *pp, size_t bytes, err *e) {
    void **p = (void **)pp;
    *p = NULL;
    cudaError_t rc = cudaMallocHost(p, bytes ? bytes : 1);
    if (rc != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return err_set(e, "gpu lane %s: cannot allocate %zu bytes of pinned memory: %s", L->m->name,
                       bytes, cudaGetErrorString(rc));
    }
    return 0;
}

extern "C" void gpu_lane_free(gpu_lane *L) {
    if (!L) return;
    float *dev[] = {L->state, L->in, L->out, L->acc, L->k2,  L->v2,  L->qr,
                    L->rr,    L->a,  L->p,   L->nq2, L->nk2, L->beff};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaFree(dev[i]);
    if (L->scratch) cudaFree(L->scratch);
    if (L->cscratch) cudaFree(L->cscratch);
    if (L->part) cudaFree(L->part);
    if (L->h_in) cudaFreeHost(L->h_in);
    if (L->h_out) cudaFreeHost(L->h_out);
    if (L->gr)
        for (int i = 0; i < 2 * (L->max_batch + 1); i++)
            if (L->gr[i].exec) cudaGraphExecDestroy(L->gr[i].exec);
    free(L->gr);
    if (L->st) {
        cudaStreamSynchronize(L->st);
        cudaStreamDestroy(L->st);
    }
    for (int i = 0; i < 2; i++)
        if (L->ev[i]) cudaEventDestroy(L->ev[i]);
    free(L);
}

extern "C" int gpu_lane_init(gpu_lane **out, const mixer_ops *m, const mixer_cfg *c,
                             const float *state_host, int max_batch, err *e) {
    *out = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char why[256];
    if (!gpu_available(why, sizeof why)) return err_set(e, "%s", why);
    if (!gpu_mixer_supported(m, GPU_STEP))
        return err_set(e, "gpu lane: no GPU step kernels for mixer '%s'", m->name);
    if (max_batch < 1) return err_set(e, "gpu lane %s: max_batch %d", m->name, max_batch);
    gpu_lane *L = (gpu_lane *)calloc(1, sizeof *L);
    if (!L) return err_set(e, "out of memory");
    L->m = m, L->c = *c, L->max_batch = max_batch;
    const int H = c->H, dk = c->dk, dv = c->dv;
    const size_t B = (size_t)max_batch;
    L->ns = m->state_floats(c);
    L->np = mixer_probe_floats(m, c);
    L->npd = L->np;
    if (name_is(m, "gdn") || name_is(m, "deltanet") || name_is(m, "kaczmarz")) {
        L->kind = LK_DELTA;
        L->kacz = name_is(m, "kaczmarz"), L->has_g = !name_is(m, "deltanet");
        L->npd = (size_t)H * GDP_COUNT;
        if (m->nprobes > LANE_MAX_PROBES) {
            gpu_lane_free(L);
            return err_set(e, "gpu lane %s: %d probes", m->name, m->nprobes);
        }
        for (int i = 0; i < m->nprobes; i++) {
            L->map[i] = -1;
            for (int g = 0; g < GDP_COUNT; g++)
                if (!strcmp(m->probes[i].name, LANE_GDP_NAMES[g])) L->map[i] = g;
            L->poff[i] = mixer_probe_offset(m, c, i);
            L->pw[i] = mixer_width_floats(c, m->probes[i].width);
        }
    } else if (name_is(m, "gla") || name_is(m, "mamba2")) {
        L->kind = LK_LD, L->per_key = name_is(m, "gla");
    } else if (name_is(m, "kalman")) {
        L->kind = LK_KALMAN, L->prior = (c->variant & 2) != 0;
    } else if (name_is(m, "kata")) {
        L->kind = c->variant == KATA_DELTA ? LK_KATA_DELTA : LK_KATA;
    } else {
        L->kind = LK_ATTN, L->plx = name_is(m, "parallax");
    }
    for (int i = 0; i < m->ninputs; i++) {
        const mixer_input w = m->inputs[i].which;
        L->in_w[w] = (size_t)H * mixer_input_floats(c, w);
    }
    for (int i = 0; i < IN_COUNT; i++) L->in_tok += L->in_w[i];
    int rc = 0;
    const size_t out_tok = (size_t)H * dv + L->npd;
    const char *genv = getenv("MIXSCOPE_LANES_GRAPH");
    L->graphs = L->kind != LK_ATTN && !(genv && !strcmp(genv, "0"));
    if (cudaStreamCreate(&L->st) != cudaSuccess) {
        L->st = NULL;
        cudaGetLastError();
        gpu_lane_free(L);
        return err_set(e, "gpu lane %s: cannot create a stream", m->name);
    }
    for (int i = 0; i < 2; i++)
        if (cudaEventCreate(&L->ev[i]) != cudaSuccess) {
            L->ev[i] = NULL;
            cudaGetLastError();
            gpu_lane_free(L);
            return err_set(e, "gpu lane %s: cannot create an event", m->name);
        }
    if (L->graphs && !(L->gr = (lane_graph *)calloc(2 * (size_t)(max_batch + 1), sizeof *L->gr))) {
        gpu_lane_free(L);
        return err_set(e, "out of memory");
    }
    rc = lane_alloc(L, &L->state, L->ns * 4, e) || lane_alloc(L, &L->in, B * L->in_tok * 4, e) ||
         lane_alloc(L, &L->out, B * out_tok * 4, e) ||
         host_alloc(L, &L->h_in, B * L->in_tok * 4, e) ||
         host_alloc(L, &L->h_out, B * out_tok * 4, e);
    if (!rc && L->kind == LK_DELTA) {
        const size_t nblk = (size_t)(dv + 31) / 32;
        rc = lane_alloc(L, &L->nq2, B * H * 4, e) || lane_alloc(L, &L->nk2, B * H * 4, e) ||
             lane_alloc(L, &L->beff, B * H * 4, e) ||
             lane_alloc(L, &L->part, B * H * nblk * GM_NACC * 8, e);
        L->pm.n = GDP_COUNT, L->pm.layer_off = 0, L->pm.tok_stride = (int)L->npd;
        L->pm.head_stride = GDP_COUNT;
        for (int p = 0; p < GDP_COUNT; p++) L->pm.map[p] = p, L->pm.off[p] = p;
    } else if (!rc && L->kind == LK_LD) {
        rc = lane_alloc(L, &L->acc, (size_t)H * (8 + dk) * 4, e);
    } else if (!rc && L->kind == LK_KALMAN) {
        const size_t lanes = (size_t)H * dv * dk;
        if (c->params[0])
            rc = lane_alloc(L, &L->a, lanes * 4, e) ||
                 gpu_copy_to_device(L->a, c->params[0], lanes * 4, e);
        if (!rc && c->params[1])
            rc = lane_alloc(L, &L->p, lanes * 4, e) ||
                 gpu_copy_to_device(L->p, c->params[1], lanes * 4, e);
        if (!rc) L->up += (c->params[0] ? lanes * 4 : 0) + (c->params[1] ? lanes * 4 : 0);
    } else if (!rc && L->kind == LK_KATA) {
        rc = lane_alloc(L, &L->scratch,
                        gpu_kata_scratch_bytes(1, 1, H, dk, dv, c->variant, c->groups, 0), e);
    } else if (!rc && L->kind == LK_KATA_DELTA) {
        rc = lane_alloc(L, &L->scratch, gpu_kata_delta_scratch_bytes(H, dk, dv, c->groups), e) ||
             gpu_kata_delta_prepare(H, dk, dv, c->groups, L->scratch, L->st, e) ||
             lane_alloc(L, &L->cscratch,
                        gpu_kata_delta_chunked_scratch_bytes(H, dk, dv, c->groups, 64), e);
    } else if (!rc && L->kind == LK_ATTN) {
        rc = lane_alloc(L, &L->scratch, gpu_attn_decode_scratch_bytes(H, dv, c->max_t), e) ||
             lane_alloc(L, &L->qr, B * H * dk * 4, e) ||
             (L->plx && lane_alloc(L, &L->rr, B * H * dk * 4, e));
    }
    if (rc || gpu_lane_upload(L, state_host, e)) {
        gpu_lane_free(L);
        return err_prefix(e, "gpu lane %s", m->name);
    }
    L->stats.init_ms = ms_since(&t0);
    *out = L;
    return 0;
}

extern "C" int gpu_lane_upload(gpu_lane *L, const float *state_host, err *e) {
    L->dirty_lo = L->dirty_hi = 0;
    CUDA_TRY(cudaMemcpy(L->state, state_host, L->ns * sizeof(float), cudaMemcpyHostToDevice),
             "gpu lane: state up");
    L->up += L->ns * sizeof(float);
    return 0;
}

extern "C" int gpu_lane_download(gpu_lane *L, float *state_host, err *e) {
    L->dirty_lo = L->dirty_hi = 0;
    CUDA_TRY(cudaMemcpy(state_host, L->state, L->ns * sizeof(float), cudaMemcpyDeviceToHost),
             "gpu lane: state down");
    L->down += L->ns * sizeof(float);
    return 0;
}

extern "C" int gpu_lane_sync(gpu_lane *L, float *state_host, err *e) {
    if (L->kind != LK_ATTN) return gpu_lane_download(L, state_host, e);
    // a KV cache: K [max_t, H, dk] then V [max_t, H, dv]; the rows [lo, hi) of each changed
    const int lo = L->dirty_lo, hi = L->dirty_hi;
    if (hi > lo) {
        const size_t H = (size_t)L->c.H, dk = (size_t)L->c.dk, dv = (size_t)L->c.dv;
        const size_t kofs = (size_t)lo * H * dk, kn = (size_t)(hi - lo) * H * dk;
        const size_t vbase = (size_t)L->c.max_t * H * dk;
        const size_t vofs = vbase + (size_t)lo * H * dv, vn = (size_t)(hi - lo) * H * dv;
        CUDA_TRY(cudaMemcpy(state_host + kofs, L->state + kofs, kn * 4, cudaMemcpyDeviceToHost),
                 "gpu lane: cache down");
        CUDA_TRY(cudaMemcpy(state_host + vofs, L->state + vofs, vn * 4, cudaMemcpyDeviceToHost),
                 "gpu lane: cache down");
        L->down += (kn + vn) * 4;
    }
    L->dirty_lo = L->dirty_hi = 0;
    return 0;
}

extern "C" size_t gpu_lane_device_bytes(const gpu_lane *L) {
    return L ? L->bytes : 0;
}

extern "C" void gpu_lane_traffic(const gpu_lane *L, size_t *up, size_t *down) {
    if (up) *up = L ? L->up : 0;
    if (down) *down = L ? L->down : 0;
}

extern "C" int gpu_mem_info(size_t *free_bytes, size_t *total_bytes, err *e) {
    size_t f = 0, t = 0;
    CUDA_TRY(cudaMemGetInfo(&f, &t), "gpu: memory info");
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
    return 0;
}

// The n tokens' launches on the device-resident state: inputs at din[i] ([n, in_w[i]]), outputs
// into dout [n, H, dv], probes (NULL: none) into dp [n, npd].
static int lane_launch(gpu_lane *L, int n, int pos0, const float *din[IN_COUNT], float *dout,
                       float *dp, err *e) {
    const mixer_cfg *c = &L->c;
    cudaStream_t st = L->st;
    const int H = c->H, dk = c->dk, dv = c->dv;
    const float *q = din[IN_Q], *k = din[IN_K], *v = din[IN_V];
    const size_t sk = (size_t)H * dk, sv = (size_t)H * dv;
    switch (L->kind) {
    case LK_DELTA: {
        // n tokens in one launch of the recurrence (and one of the probes), not n launches
        const float *g = L->has_g ? din[IN_G] : NULL, *beta = din[IN_BETA];
        if (!beta) return err_set(e, "gpu %s: no beta input", L->m->name);
        if (gm_lane_prep_run(n, H, dk, L->kacz, c->eps, q, k, beta, L->nq2, L->nk2, L->beff, st, e))
            return -1;
        gm_core_args a;
        memset(&a, 0, sizeof a);
        a.n = n, a.H = a.Hv = H, a.rep = 1, a.dk = dk, a.dv = dv, a.nblk = (dv + 31) / 32;
        a.decay = g != NULL, a.scale = c->scale;
        a.Q = q, a.K = k, a.V = v, a.ldqk = sk, a.ldv = a.ldo = sv;
        a.G = g, a.Beff = L->beff, a.K2 = L->nk2;
        a.state = L->state, a.O = dout, a.part = L->part;
        if (gm_core_run(a, dp != NULL, false, st, e)) return -1;
        if (!dp) return 0;
        gm_fin_args f;
        f.H = f.Hv = H, f.rep = 1, f.nblk = a.nblk, f.decay = a.decay;
        f.G = g, f.Bin = beta, f.Beff = L->beff, f.Q2 = L->nq2, f.K2 = L->nk2;
        f.part = L->part, f.probes = dp;
        return gm_probe_fin_run(f, L->pm, n, st, e);
    }
    case LK_LD: {
        const float *g = din[L->per_key ? IN_GK : IN_G];
        const size_t sg = L->per_key ? sk : (size_t)H;
        for (int t = 0; t < n; t++) {
            int rc = dp ? gpu_ld_step_probes(H, dk, dv, c->scale, L->per_key, q + t * sk,
                                             k + t * sk, v + t * sv, g + t * sg, L->state,
                                             dout + t * sv, L->acc, dp + (size_t)t * L->npd, st, e)
                        : gpu_ld_step(1, H, dk, dv, c->scale, 0, L->per_key, q + t * sk, k + t * sk,
                                      v + t * sv, g + t * sg, L->state, dout + t * sv, st, e);
            if (rc) return -1;
        }
        return 0;
    }
    case LK_KALMAN: {
        const float *lv = din[IN_LV];
        for (int t = 0; t < n; t++) {
            const float *lvt = lv ? lv + t * sv : NULL;
            int rc =
                dp ? gpu_kalman_step_probes(H, dv, dk, c->scale, L->prior, q + t * sk, k + t * sk,
                                            v + t * sv, lvt, L->a, L->p, L->state, dout + t * sv,
                                            dp + (size_t)t * L->npd, st, e)
                   : gpu_kalman_step(H, dv, dk, c->scale, L->prior, 0, q + t * sk, k + t * sk,
                                     v + t * sv, lvt, L->a, L->p, L->state, dout + t * sv, st, e);
            if (rc) return -1;
        }
        return 0;
    }
    case LK_KATA:
        for (int t = 0; t < n; t++) {
            if (gpu_kata_step_probes(H, dk, dv, c->variant, c->groups, c->scale, c->eps, q + t * sk,
                                     k + t * sk, v + t * sv, L->state, dout + t * sv,
                                     dp ? dp + (size_t)t * L->npd : NULL, L->scratch, st, e))
                return -1;
        }
        return 0;
    case LK_KATA_DELTA: {
        const float *beta = din[IN_BETA]; // NULL: 1, as the CPU
        // a batch without probes in the chunked form
        const int C = dp ? 0 : gpu_kata_delta_call_chunk(n, dk);
        if (C)
            return gpu_kata_delta_chunked(n, H, dk, dv, c->groups, C, c->scale, 0, q, k, v, beta,
                                          L->state, dout, L->cscratch, st, e);
        for (int t = 0; t < n; t++)
            if (gpu_kata_delta_step(H, dk, dv, c->groups, c->scale, q + t * sk, k + t * sk,
                                    v + t * sv, beta ? beta + (size_t)t * H : NULL, L->state,
                                    dout + t * sv, dp ? dp + (size_t)t * L->npd : NULL, L->scratch,
                                    st, e))
                return -1;
        return 0;
    }
    case LK_ATTN: {
        // RoPE and the cache write for the n tokens first (a row never reads a later slot)
        if (gpu_attn_prep(n, H, dk, dv, pos0, c->rope, c->rope_theta, c->max_t, 0, q,
                          L->plx ? din[IN_R] : NULL, k, v, L->state, L->qr, L->rr, st, e))
            return -1;
        for (int t = 0; t < n; t++)
            if (gpu_attn_decode(H, dk, dv, c->max_t, pos0 + t, c->window, c->scale, L->qr + t * sk,
                                L->plx ? L->rr + t * sk : NULL, L->state, dout + t * sv,
                                dp ? dp + (size_t)t * L->npd : NULL, L->scratch, st, e))
                return -1;
        return 0;
    }
    }
    return err_set(e, "gpu lane: unknown kind");
}

// The n tokens' launches as a graph: captured on the lane's stream the first time (per n, with or
// without probes, and the input offsets sig), replayed after. A capture that fails (a call the
// capture does not allow) turns the lane's graphs off and launches directly: nothing captured ran.
static int lane_graph_launch(gpu_lane *L, int n, int pos0, const float *din[IN_COUNT], float *dout,
                             float *dp, const size_t sig[IN_COUNT], err *e) {
    lane_graph *G = &L->gr[(dp ? L->max_batch + 1 : 0) + n];
    if (G->exec && memcmp(G->sig, sig, sizeof G->sig)) {
        cudaGraphExecDestroy(G->exec);
        G->exec = NULL;
    }
    if (!G->exec) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        err ce = {{0}};
        cudaError_t rc = cudaStreamBeginCapture(L->st, cudaStreamCaptureModeThreadLocal);
        if (rc == cudaSuccess) {
            const int lrc = lane_launch(L, n, pos0, din, dout, dp, &ce);
            rc = cudaStreamEndCapture(L->st, &graph);
            if (lrc && rc == cudaSuccess) rc = cudaErrorUnknown;
        }
        if (rc == cudaSuccess) rc = cudaGraphInstantiate(&exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        L->stats.capture_ms += ms_since(&t0);
        if (rc != cudaSuccess) {
            if (exec) cudaGraphExecDestroy(exec);
            cudaGetLastError();
            L->graphs = 0;
            return lane_launch(L, n, pos0, din, dout, dp, e);
        }
        G->exec = exec;
        memcpy(G->sig, sig, sizeof G->sig);
        L->stats.captured++;
    }
    CUDA_TRY(cudaGraphLaunch(G->exec, L->st), "gpu lane: graph launch");
    L->stats.replayed++;
    return 0;
}

extern "C" int gpu_lane_begin(gpu_lane *L, const mixer_seq *x, int pos0, int probes, err *e) {
    const mixer_cfg *c = &L->c;
    const int n = x->T;
    if (L->pending) return err_set(e, "gpu lane %s: a step is already under way", L->m->name);
    if (n < 0 || n > L->max_batch)
        return err_set(e, "gpu lane %s: %d tokens in a step (at most %d)", L->m->name, n,
                       L->max_batch);
    for (int i = 0; i < L->m->ninputs; i++)
        if (L->m->inputs[i].required && !x->in[L->m->inputs[i].which])
            return err_set(e, "gpu %s: missing input %s", L->m->name, L->m->inputs[i].name);
    L->pend_n = L->pend_nv = n, L->pend_probes = probes != 0;
    if (n == 0) {
        L->pending = 1;
        return 0;
    }
    int nv = n;
    if (L->kind == LK_ATTN) { // positions past the cache answer zeros, as the CPU does
        nv = pos0 < 0 ? 0 : c->max_t - pos0 < n ? c->max_t - pos0 : n;
        if (nv < 0) nv = 0;
        L->pend_nv = nv;
        if (nv == 0) {
            L->pending = 1;
            return 0;
        }
    }
    // pack the inputs the mixer reads: [nv, width] each, one after the other; an array passed
    // for two inputs of one width (the raw lanes' q = k) goes up once
    const float *din[IN_COUNT] = {0};
    size_t sig[IN_COUNT], off = 0;
    for (int i = 0; i < IN_COUNT; i++) {
        sig[i] = (size_t)-1;
        if (!L->in_w[i] || !x->in[i]) continue;
        for (int j = 0; j < i && sig[i] == (size_t)-1; j++)
            if (x->in[j] == x->in[i] && sig[j] != (size_t)-1 && L->in_w[j] == L->in_w[i])
                sig[i] = sig[j];
        if (sig[i] == (size_t)-1) {
            const size_t w = (size_t)nv * L->in_w[i];
            memcpy(L->h_in + off, x->in[i], w * sizeof(float));
            sig[i] = off;
            off += w;
        }
        din[i] = L->in + sig[i];
    }
    CUDA_TRY(cudaEventRecord(L->ev[0], L->st), "gpu lane: event");
    CUDA_TRY(cudaMemcpyAsync(L->in, L->h_in, off * sizeof(float), cudaMemcpyHostToDevice, L->st),
             "gpu lane: inputs up");
    L->up += off * sizeof(float);
    const size_t sv = (size_t)c->H * c->dv;
    float *dout = L->out, *dp = probes ? L->out + (size_t)nv * sv : NULL;
    const int rc = L->graphs ? lane_graph_launch(L, nv, pos0, din, dout, dp, sig, e)
                             : lane_launch(L, nv, pos0, din, dout, dp, e);
    if (rc) {
        cudaStreamSynchronize(L->st);
        return err_prefix(e, "gpu lane %s", L->m->name);
    }
    if (L->kind == LK_ATTN) {
        if (L->dirty_hi <= L->dirty_lo) L->dirty_lo = pos0, L->dirty_hi = pos0 + nv;
        if (pos0 < L->dirty_lo) L->dirty_lo = pos0;
        if (pos0 + nv > L->dirty_hi) L->dirty_hi = pos0 + nv;
    }
    const size_t down = (size_t)nv * sv + (probes ? (size_t)nv * L->npd : 0);
    CUDA_TRY(cudaMemcpyAsync(L->h_out, L->out, down * sizeof(float), cudaMemcpyDeviceToHost, L->st),
             "gpu lane: outputs down");
    CUDA_TRY(cudaEventRecord(L->ev[1], L->st), "gpu lane: event");
    L->down += down * sizeof(float);
    L->pending = 1;
    return 0;
}

extern "C" int gpu_lane_end(gpu_lane *L, float *o_host, float *probes_host, err *e) {
    const mixer_cfg *c = &L->c;
    const int H = c->H, n = L->pend_n, nv = L->pend_nv;
    if (!L->pending) return err_set(e, "gpu lane %s: no step under way", L->m->name);
    L->pending = 0;
    if (!L->pend_probes) probes_host = NULL;
    if (n == 0) return 0;
    const size_t sv = (size_t)H * c->dv;
    if (nv < n) { // attention past the cache: zeros
        memset(o_host + (size_t)nv * sv, 0, (size_t)(n - nv) * sv * sizeof(float));
        if (probes_host)
            memset(probes_host + (size_t)nv * L->np, 0, (size_t)(n - nv) * L->np * sizeof(float));
        if (nv == 0) return 0;
    }
    struct timespec w0;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    CUDA_TRY(cudaStreamSynchronize(L->st), "gpu lane step");
    L->stats.wait_ms += ms_since(&w0);
    float ms = 0;
    if (cudaEventElapsedTime(&ms, L->ev[0], L->ev[1]) == cudaSuccess) L->stats.device_ms += ms;
    cudaGetLastError();
    L->stats.steps++;
    memcpy(o_host, L->h_out, (size_t)nv * sv * sizeof(float));
    if (!probes_host) return 0;
    const float *hp = L->h_out + (size_t)nv * sv;
    if (L->kind != LK_DELTA) {
        memcpy(probes_host, hp, (size_t)nv * L->np * sizeof(float));
        return 0;
    }
    // the delta family: [nv, H, GDP_COUNT] into the mixer's layout (as gpu_delta_run_probed)
    const mixer_ops *m = L->m;
    for (int t = 0; t < nv; t++)
        for (int i = 0; i < m->nprobes; i++) {
            float *dst = probes_host + (size_t)t * L->np + L->poff[i];
            const int w = L->pw[i], g = L->map[i];
            if (g >= 0 && w == 1)
                for (int h = 0; h < H; h++) dst[h] = hp[((size_t)t * H + h) * GDP_COUNT + g];
            else
                for (int j = 0; j < H * w; j++) dst[j] = NAN;
        }
    return 0;
}

extern "C" int gpu_lane_step(gpu_lane *L, const mixer_seq *x, int pos0, float *o_host,
                             float *probes_host, err *e) {
    if (gpu_lane_begin(L, x, pos0, probes_host != NULL, e)) return -1;
    return gpu_lane_end(L, o_host, probes_host, e);
}

extern "C" void gpu_lane_get_stats(const gpu_lane *L, gpu_lane_stats *s) {
    if (L)
        *s = L->stats;
    else
        memset(s, 0, sizeof *s);
}
