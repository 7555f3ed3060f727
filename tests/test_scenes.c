/* test_scenes.c: the generators (prompts and raw streams) against their definitions, and every
 * scene run headless through the binary, checking the numbers it prints (the physics each scene
 * teaches) and the figures it writes; the tour (`mixscope` with no arguments) likewise. */
#include "testutil.h"

#include <sys/stat.h>

#include "core/fileio.h"
#include "scenes/prompts.h"
#include "scenes/raw.h"
#include "scenes/stream.h"
#include "tests/tgroupdir.h"

/* ---- output parsing ---- */

/* The n-th (0-based) line of text that starts with prefix (after leading spaces when skip_ws),
 * or NULL. */
static const char *find_line(const char *text, const char *prefix, int n) {
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p;) {
        const char *q = p;
        while (*q == ' ') q++;
        if (!strncmp(q, prefix, pl) && n-- == 0) return q;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return NULL;
}

/* The line of text after `line` (NULL at the end). */
static const char *next_line(const char *line) {
    const char *p = line ? strchr(line, '\n') : NULL;
    return p && p[1] ? p + 1 : NULL;
}

/* Every whitespace-separated token of the line (up to '\n', after `skip` characters) that is a
 * whole number, in order; '-' counts as NaN. Returns the count. */
static int numbers(const char *line, size_t skip, double *out, int max) {
    int n = 0;
    const char *p = line + skip;
    while (*p && *p != '\n' && n < max) {
        while (*p == ' ') p++;
        if (!*p || *p == '\n') break;
        const char *end = p;
        while (*end && *end != ' ' && *end != '\n') end++;
        char tok[64];
        size_t l = (size_t)(end - p) < sizeof tok - 1 ? (size_t)(end - p) : sizeof tok - 1;
        memcpy(tok, p, l), tok[l] = '\0';
        char *e;
        double v = strtod(tok, &e);
        if (!strcmp(tok, "-"))
            out[n++] = NAN;
        else if (*e == '\0' && e != tok)
            out[n++] = v;
        p = end;
    }
    return n;
}

/* The numbers of the row labelled `label` (the n-th such row). */
static int row(const char *text, const char *label, int nth, double *out, int max) {
    const char *l = find_line(text, label, nth);
    if (!l) fail_msg("no row '%s' (#%d) in:\n%s", label, nth, text);
    return numbers(l, strlen(label), out, max);
}

static int file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int)st.st_size : -1;
}

/* The line holding `what` at or after `from` in text, copied into buf ("" when absent). */
static const char *line_with(const char *text, const char *from, const char *what, char *buf,
                             size_t n) {
    const char *p = from ? strstr(text, from) : text;
    const char *q = p ? strstr(p, what) : NULL;
    buf[0] = '\0';
    if (!q) return buf;
    while (q > text && q[-1] != '\n') q--;
    size_t k = strcspn(q, "\n");
    snprintf(buf, n, "%.*s", (int)(k < n ? k : n - 1), q);
    return buf;
}

static char *run_scene(const char *name, int *rc) {
    char *out;
    *rc = run_mixscope(&out, "-c 'set outdir %s; source scenes/%s.scene'", g_dir, name);
    return out;
}

static void assert_png(const char *name) {
    char *p = path_join(g_dir, name);
    int sz = file_size(p);
    if (sz < 10000) fail_msg("%s: missing or too small (%d bytes)", p, sz);
    FILE *f = fopen(p, "rb");
    unsigned char sig[8] = {0};
    assert_int_equal(fread(sig, 1, 8, f), 8);
    fclose(f);
    assert_memory_equal(sig, "\x89PNG\r\n\x1a\n", 8);
    free(p);
}

/* ---- generators ---- */

static void test_a5_is_the_alternating_group(void **state) {
    (void)state;
    int seen[A5_ORDER] = {0}, id = a5_identity();
    int order_count[7] = {0};
    for (int a = 0; a < A5_ORDER; a++) {
        int p[5], inv = 0;
        a5_perm(a, p);
        for (int i = 0; i < 5; i++)
            for (int j = i + 1; j < 5; j++) inv += p[i] > p[j];
        assert_int_equal(inv % 2, 0); /* even */
        assert_int_equal(a5_compose(id, a), a);
        assert_int_equal(a5_compose(a, id), a);
        /* order of a: 1, 2, 3 or 5 */
        int x = a, k = 1;
        while (x != id && k < 10) x = a5_compose(x, a), k++;
        assert_true(k == 1 || k == 2 || k == 3 || k == 5);
        order_count[k]++;
        for (int b = 0; b < A5_ORDER; b++) {
            int c = a5_compose(a, b);
            assert_in_range(c, 0, A5_ORDER - 1);
            if (a == 0) seen[c]++;
        }
    }
    for (int i = 0; i < A5_ORDER; i++) assert_int_equal(seen[i], 1); /* a row is a permutation */
    /* A5: 1 identity, 15 involutions, 20 of order 3, 24 of order 5 */
    assert_int_equal(order_count[1], 1);
    assert_int_equal(order_count[2], 15);
    assert_int_equal(order_count[3], 20);
    assert_int_equal(order_count[5], 24);
    /* not abelian; associative on a sample */
    int nonab = 0;
    for (int a = 0; a < A5_ORDER; a++)
        for (int b = 0; b < A5_ORDER; b++) nonab += a5_compose(a, b) != a5_compose(b, a);
    assert_true(nonab > 0);
    for (int a = 0; a < A5_ORDER; a += 7)
        for (int b = 0; b < A5_ORDER; b += 5)
            for (int c = 0; c < A5_ORDER; c += 11)
                assert_int_equal(a5_compose(a5_compose(a, b), c), a5_compose(a, a5_compose(b, c)));
}

static void test_a5_prompt_targets_are_prefix_products(void **state) {
    (void)state;
    task_prompt p;
    err e = {{0}};
    assert_int_equal(task_a5(&p, 200, 3, &e), 0);
    assert_int_equal(p.vocab, 60);
    assert_int_equal(p.nscored, 200);
    int acc = a5_identity();
    for (int t = 0; t < p.n; t++) {
        /* apply the permutations one after the other to the points, compare with the target */
        acc = a5_compose(acc, p.ids[t]);
        assert_int_equal(p.target[t], acc);
    }
    int pts[5] = {0, 1, 2, 3, 4}, tgt[5];
    for (int t = 0; t < p.n; t++) {
        int g[5], nx[5];
        a5_perm(p.ids[t], g);
        for (int i = 0; i < 5; i++) nx[i] = g[pts[i]];
        memcpy(pts, nx, sizeof pts);
    }
    a5_perm(p.target[p.n - 1], tgt);
    assert_memory_equal(pts, tgt, sizeof pts);
    task_free(&p);
}

static void test_mqar_layout(void **state) {
    (void)state;
    task_prompt p, q;
    err e = {{0}};
    assert_int_equal(task_mqar(&p, 8, 12, 64, 5, &e), 0);
    assert_int_equal(p.n, 2 * (8 + 12));
    assert_int_equal(p.nscored, 12);
    for (int i = 0; i < 8; i++) {
        assert_in_range(p.ids[2 * i], 1, 31);      /* keys */
        assert_in_range(p.ids[2 * i + 1], 32, 63); /* values */
        for (int j = 0; j < i; j++) assert_int_not_equal(p.ids[2 * i], p.ids[2 * j]);
        assert_int_equal(p.target[2 * i], -1);
    }
    for (int t = 16; t < p.n; t += 2) {
        /* the query's key was stored, and the target is the value stored with it */
        int found = -1;
        for (int i = 0; i < 8; i++)
            if (p.ids[2 * i] == p.ids[t]) found = i;
        assert_true(found >= 0);
        assert_int_equal(p.target[t], p.ids[2 * found + 1]);
        assert_int_equal(p.ids[t + 1], p.target[t]);
    }
    /* the first round of queries asks each key once */
    int asked[8] = {0};
    for (int t = 16; t < 32; t += 2)
        for (int i = 0; i < 8; i++) asked[i] += p.ids[2 * i] == p.ids[t];
    for (int i = 0; i < 8; i++) assert_int_equal(asked[i], 1);
    /* same seed, same prompt; another seed, another */
    assert_int_equal(task_mqar(&q, 8, 12, 64, 5, &e), 0);
    assert_memory_equal(p.ids, q.ids, (size_t)p.n * sizeof *p.ids);
    task_free(&q);
    assert_int_equal(task_mqar(&q, 8, 12, 64, 6, &e), 0);
    assert_true(memcmp(p.ids, q.ids, (size_t)p.n * sizeof *p.ids) != 0);
    task_free(&q);
    task_free(&p);
    assert_int_equal(task_mqar(&p, 40, 4, 64, 1, &e), -1); /* 40 distinct keys need vocab > 82 */
    assert_non_null(strstr(e.msg, "pairs=40"));
}

static void test_niah_and_overwrite(void **state) {
    (void)state;
    task_prompt p;
    err e = {{0}};
    assert_int_equal(task_niah(&p, 100, 256, 0.5, 9, &e), 0);
    assert_int_equal(p.nscored, 1);
    int key = p.ids[98], val = p.target[98];
    assert_int_equal(p.ids[99], val);
    assert_in_range(key, 1, 63);
    int at = -1, count = 0;
    for (int t = 0; t < 98; t++) {
        if (p.ids[t] < 64) count++;
        if (p.ids[t] == key) at = t;
    }
    assert_int_equal(count, 2); /* only the needle pair is below the filler range */
    assert_int_equal(at, 48);   /* depth 0.5 of len - 4 */
    assert_int_equal(p.ids[at + 1], val);
    task_free(&p);

    assert_int_equal(task_overwrite(&p, 5, 3, 64, 2, &e), 0);
    assert_int_equal(p.n, 2 * 5 * 4);
    for (int t = 30; t < 40; t += 2) {
        int latest = -1;
        for (int s = 0; s < 30; s += 2)
            if (p.ids[s] == p.ids[t]) latest = p.ids[s + 1];
        assert_int_equal(p.target[t], latest);
    }
    task_free(&p);
}

static void test_streams(void **state) {
    (void)state;
    raw_stream s;
    err e = {{0}};
    assert_int_equal(stream_keys(&s, 300, 2, 8, 4, 0.25, 4.0, 1, &e), 0);
    double lo = 1e9, hi = 0, lsum = 0;
    for (int t = 0; t < s.T; t++)
        for (int h = 0; h < 2; h++) {
            const float *k = s.k + ((size_t)t * 2 + h) * 8, *v = s.v + ((size_t)t * 2 + h) * 4;
            double n = 0, nv = 0;
            for (int i = 0; i < 8; i++) n += (double)k[i] * k[i];
            for (int i = 0; i < 4; i++) nv += (double)v[i] * v[i];
            n = sqrt(n);
            assert_true(fabs(n - s.knorm[t * 2 + h]) < 1e-5 * n);
            assert_true(fabs(sqrt(nv) - 1) < 1e-5);
            lo = fmin(lo, n), hi = fmax(hi, n), lsum += log(n);
        }
    assert_true(lo >= 0.25 * (1 - 1e-6) && hi <= 4 * (1 + 1e-6));
    assert_true(lo < 0.3 && hi > 3.3); /* spread over the range */
    /* log-uniform: the mean of log |k| is the middle of [log lo, log hi] = 0 */
    assert_true(fabs(lsum / 600) < 0.15);
    assert_int_equal(s.nqueries, 0);
    stream_free(&s);

    assert_int_equal(stream_recall(&s, 10, 25, 1, 16, 8, 1, 1, 4, &e), 0);
    assert_int_equal(s.T, 35);
    assert_int_equal(s.nqueries, 25);
    for (int t = 10; t < 35; t++) {
        int i = s.key_id[t];
        assert_true(s.query[t]);
        assert_memory_equal(s.k + t * 16, s.k + i * 16, 16 * sizeof(float));
        assert_memory_equal(s.v + t * 8, s.v + i * 8, 8 * sizeof(float)); /* the right answer */
    }
    double ma, ms, mean;
    stream_key_geometry(&s, 0, &ma, &ms, &mean);
    assert_true(ma > 0 && ma < 1 && fabs(ms - ma * ma) < 1e-9 && mean < ms);
    stream_free(&s);

    assert_int_equal(stream_overwrite(&s, 3, 4, 1, 8, 8, 1, 1, 7, &e), 0);
    assert_int_equal(s.T, 15);
    for (int t = 12; t < 15; t++) {
        int last = -1;
        for (int u = 0; u < 12; u++)
            if (s.key_id[u] == s.key_id[t]) last = u;
        assert_memory_equal(s.v + t * 8, s.v + last * 8, 8 * sizeof(float));
    }
    stream_free(&s);
    assert_int_equal(stream_keys(&s, 10, 1, 8, 8, 2, 1, 1, &e), -1); /* LO > HI */
}

/* A lane's query reads S^T k: after one write with beta = 1 the written value comes back
 * exactly (the delta rule), and the recall error of raw_recall_error is 0. */
static void test_lane_recall_exact(void **state) {
    (void)state;
    raw_stream s;
    err e = {{0}};
    assert_int_equal(stream_recall(&s, 1, 1, 1, 8, 8, 0.5, 0.5, 3, &e), 0);
    raw_lane L;
    assert_int_equal(raw_lane_build(&L, "kaczmarz", "", 1, 8, 8, 4096, 0, &e), 0);
    float *scratch = malloc(raw_scratch_floats(1, 8, 8) * sizeof *scratch);
    raw_lane_step(&L, &s, 0, scratch);
    raw_lane_step(&L, &s, 1, scratch);
    assert_true(raw_recall_error(&L, &s, 1, 0) < 1e-5);
    assert_true(isnan(raw_recall_error(&L, &s, 0, 0)));
    raw_lane_free(&L);
    /* GDN at beta = 1 on a key of norm 0.5 removes rho = 0.25 of the residual: error 0.75 */
    assert_int_equal(raw_lane_build(&L, "gdn", "", 1, 8, 8, 4096, 0, &e), 0);
    raw_lane_step(&L, &s, 0, scratch);
    raw_lane_step(&L, &s, 1, scratch);
    /* S = 0.25 v k^T / |k|^2 ... read with k: S^T k = rho v */
    assert_true(fabs(raw_recall_error(&L, &s, 1, 0) - 0.75) < 1e-5);
    raw_lane_free(&L);
    assert_int_equal(raw_lane_build(&L, "gdn:beta=x", "", 1, 8, 8, 4096, 0, &e), -1);
    assert_int_equal(raw_lane_build(&L, "gdn", "bogus=1", 1, 8, 8, 4096, 0, &e), -1);
    assert_non_null(strstr(e.msg, "bogus"));
    free(scratch);
    stream_free(&s);
}

/* ---- the scenes through the binary ---- */

static void test_scene_kaczmarz_vs_gdn(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("kaczmarz-vs-gdn", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    /* rho by key norm: GDN follows |k|^2 (under-corrects small keys, over-corrects large ones),
     * Kaczmarz removes the same fraction eta = 1 of the residual for every key */
    const char *t = find_line(out, "rho mean over writes, by key_norm", 0);
    assert_non_null(t);
    double v[8], prev = 0;
    for (int b = 0; b < 4; b++) {
        t = next_line(t);
        if (b == 0) t = next_line(t);             /* the header */
        assert_int_equal(numbers(t, 0, v, 8), 3); /* count, gdn, kaczmarz */
        assert_true(v[1] > prev);
        prev = v[1];
        assert_true(fabs(v[2] - 1) < 1e-3);
        if (b == 0) assert_true(v[1] < 0.5);
        if (b == 3) assert_true(v[1] > 1.5);
    }
    /* r = (1 - rho) e: Kaczmarz leaves nothing along k, GDN |1 - rho| of it */
    assert_int_equal(row(out, "r_norm mean (writes)", 0, v, 8), 2);
    assert_true(v[0] > 0.3 && v[1] < 1e-4);
    assert_int_equal(row(out, "loss_after mean (writes)", 0, v, 8), 2);
    assert_true(v[1] < 1e-8);
    /* show: the first tokens side by side; rho of kaczmarz is 1 on each */
    t = find_line(out, "rho (layers side by side, head 0)", 0);
    assert_non_null(t);
    t = next_line(next_line(t));
    assert_int_equal(numbers(t, 0, v, 8), 3);
    assert_true(v[0] == 0 && fabs(v[2] - 1) < 1e-4);
    assert_png("kaczmarz-vs-gdn.png");
    assert_png("kaczmarz-vs-gdn-rho.png");
    free(out);
}

static void test_scene_kalman_gates(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("kalman-gates", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    double v[8];
    /* the write gate grows with the key norm (phi = lambda_v k^2) */
    const char *t = find_line(out, "write_mean mean over writes, by key_norm", 0);
    assert_non_null(t);
    t = next_line(next_line(t));
    double prev = -1;
    for (int b = 0; b < 4; b++, t = next_line(t)) {
        assert_int_equal(numbers(t, 0, v, 8), 2);
        assert_true(v[1] > prev && v[1] >= 0 && v[1] < 1);
        prev = v[1];
    }
    assert_true(prev > 0.3);
    /* more precise observations write more and forget more: w up, f = a (1 - w) down */
    assert_int_equal(row(out, "write_mean mean (writes)", 1, v, 8), 3);
    assert_true(v[0] < v[1] && v[1] < v[2]);
    double w[3] = {v[0], v[1], v[2]};
    assert_int_equal(row(out, "forget_mean mean (writes)", 1, v, 8), 3);
    assert_true(v[0] > v[1] && v[1] > v[2]);
    /* f = a (1 - w) lane by lane, so the means too (a = 0.9) */
    for (int i = 0; i < 3; i++) assert_true(fabs(v[i] - 0.9 * (1 - w[i])) < 1e-4);
    assert_png("kalman-gates.png");
    assert_png("kalman-gates-write.png");
    free(out);
}

static void test_scene_kata_capacity(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("kata-capacity", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    const int N[3] = {16, 64, 256};
    double m1[3], delta[3], dnet[3], v[8];
    for (int i = 0; i < 3; i++) {
        /* the geometry line: max |cos| >= the Welch floor sqrt((N - p) / (p (N - 1))) */
        const char *g = find_line(out, "keys (head 0):", i);
        assert_non_null(g);
        double ma, welch, ms, psd;
        const char *p = strstr(g, "max |cos| ");
        assert_non_null(p);
        assert_int_equal(sscanf(p, "max |cos| %lf (Welch floor %lf), max cos^2 %lf (PSD floor %lf)",
                                &ma, &welch, &ms, &psd),
                         4);
        double want = N[i] > 64 ? sqrt((N[i] - 64.0) / (64.0 * (N[i] - 1))) : 0;
        assert_true(fabs(welch - want) < 1e-4);
        assert_true(ma >= welch && ms >= psd && fabs(ms - ma * ma) < 1e-3);
        assert_int_equal(row(out, "recall_err mean", i, v, 8), 4);
        m1[i] = v[0], dnet[i] = v[2], delta[i] = v[3];
        assert_true(v[1] > 0.8); /* orthant: common-mode interference */
    }
    for (int i = 0; i < 3; i++) {
        if (i) assert_true(m1[i] > m1[i - 1] && dnet[i] > dnet[i - 1]);
        assert_true(delta[i] < m1[i]); /* the delta write in feature space recalls best */
    }
    assert_true(m1[2] < dnet[2]); /* past p keys, squared interference beats the raw delta rule */
    assert_png("kata-capacity.png");
    free(out);
}

static void test_scene_parallax_cor(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("parallax-cor", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    double v[8];
    /* the correction is linear in the probe: COR x4 per x4 of rscale */
    assert_int_equal(row(out, "cor mean (writes)", 0, v, 8), 3);
    assert_true(v[0] > 0.01 && v[2] > 1);
    assert_true(fabs(v[1] / v[0] - 4) < 0.2 && fabs(v[2] / v[1] - 4) < 0.2);
    assert_int_equal(row(out, "neg_mass mean (writes)", 0, v, 8), 3);
    assert_true(v[0] <= v[1] && v[1] < v[2] && v[2] > 0.1);
    /* sharper attention: COR and entropy fall together, recall appears */
    assert_int_equal(row(out, "cor mean (writes)", 1, v, 8), 4);
    for (int i = 1; i < 4; i++) assert_true(v[i] < v[i - 1]);
    assert_true(v[3] < 0.01);
    assert_int_equal(row(out, "recalled (< 0.1)", 1, v, 8), 0); /* "n/m" is not one number */
    const char *r = find_line(out, "recalled (< 0.1)", 1);
    assert_non_null(strstr(r, "32/32"));
    /* show: softmax has no COR ('-'), the lanes grow */
    const char *t = find_line(out, "mean ", 0);
    assert_int_equal(numbers(t, 4, v, 8), 4);
    assert_true(v[0] < v[1] && v[1] < v[2] && isnan(v[3]));
    assert_png("parallax-cor.png");
    free(out);
}

static void test_scene_mqar_recall(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("mqar-recall", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    double gdn, soft;
    const char *l = find_line(out, "recall softmax:", 0);
    assert_non_null(l);
    assert_int_equal(sscanf(strchr(l, ':') + 1, " mean error %lf", &soft), 1);
    assert_non_null(strstr(l, "recalled 24/24"));
    assert_true(soft < 1e-4);
    l = find_line(out, "recall gdn:", 0);
    assert_int_equal(sscanf(strchr(l, ':') + 1, " mean error %lf", &gdn), 1);
    assert_true(gdn > 0.1 && gdn < 2); /* 24 keys in R^32 overlap: the delta rule loses some */
    /* the model part: the shipped trained models recall, the untrained one does not, and the
     * swapped cores are restored */
    int c[4], n[4];
    for (int i = 0; i < 4; i++) {
        l = find_line(out, "mqar accuracy: ", i);
        assert_non_null(l);
        assert_int_equal(sscanf(l, "mqar accuracy: %d/%d", &c[i], &n[i]), 2);
        assert_int_equal(n[i], 48);
    }
    assert_true(c[0] >= 45 && c[1] >= 45 && c[2] >= 45); /* trained gdn, kaczmarz, softmax */
    assert_true(c[3] <= 5);                              /* untrained: chance is 1/128 */
    double v[8];
    assert_int_equal(row(out, "task accuracy", 0, v, 8), 3);
    for (int i = 0; i < 3; i++) assert_true(v[i] >= 0.9 && v[i] <= 1);
    assert_int_equal(row(out, "loss (nats/token)", 0, v, 8), 3);
    for (int i = 0; i < 3; i++) assert_true(isfinite(v[i]));
    assert_non_null(strstr(out, "cores restored"));
    assert_png("mqar-recall-gdn.png");
    assert_png("mqar-recall-kaczmarz.png");
    assert_png("mqar-recall-softmax.png");
    assert_png("mqar-recall-untrained.png");
    free(out);
}

static void test_scene_unstable_state(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("unstable-state", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    const char *l = find_line(out, "layer 0 gdn: state norm blew up at token", 0);
    assert_non_null(l);
    int tok;
    double sn, kn, rho;
    assert_int_equal(sscanf(l,
                            "layer 0 gdn: state norm blew up at token %d (state_norm %lf > 1000; "
                            "|k| %lf, rho %lf)",
                            &tok, &sn, &kn, &rho),
                     4);
    assert_true(tok > 4 && tok < 160 && sn > 1000);
    assert_true(rho > 2 && fabs(rho - kn * kn) < 0.01 * rho); /* rho = beta |k|^2, beta = 1 */
    assert_null(find_line(out, "layer 1 kaczmarz: state norm blew up", 0));
    /* compare: decay does not save GDN, half beta or Kaczmarz does */
    const char *b = find_line(out, "blew up at token", 0);
    double v[8];
    assert_int_equal(numbers(b, strlen("blew up at token"), v, 8), 5);
    assert_int_equal((int)v[0], tok);
    assert_true(v[1] > v[0]); /* gdn:decay=0.9 later, but still */
    assert_true(isnan(v[2]) && isnan(v[3]) && isnan(v[4]));
    assert_png("unstable-state.png");
    assert_png("unstable-state-matrix.png");
    free(out);
}

/* `mixscope` with no arguments: the tour, its PNGs in ./mixscope-figures, then the prompt
 * (stdin at end of file: exit 0). */
static void test_tour(void **state) {
    (void)state;
    char *dir = path_join(g_dir, "tour"), cmd[2048], cwd[1024];
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_non_null(getcwd(cwd, sizeof cwd));
    const char *bin = mixscope_bin();
    char abs_bin[1200];
    snprintf(abs_bin, sizeof abs_bin, "%s%s%s", bin[0] == '/' ? "" : cwd, bin[0] == '/' ? "" : "/",
             bin);
    snprintf(cmd, sizeof cmd, "cd '%s' && env -u DISPLAY -u WAYLAND_DISPLAY '%s' 2>&1 </dev/null",
             dir, abs_bin);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("tour exit %d:\n%s", st, out);
    assert_null(strstr(out, "mixscope: ")); /* no command failed */
    assert_non_null(strstr(out, "The tour is done: its figures are in mixscope-figures/"));
    const char *stops[] = {"[1/5] Kaczmarz", "[2/5] Kalman", "[3/5] KATA", "[4/5] Parallax",
                           "[5/5] A 1-layer Gated DeltaNet that train taught MQAR"};
    for (int i = 0; i < 5; i++) assert_non_null(strstr(out, stops[i]));
    /* the recall stop's model is trained: it answers the prompt it never saw */
    const char *acc = strstr(out, "mqar accuracy: ");
    int hits = 0, asked = 0;
    assert_non_null(acc);
    assert_int_equal(sscanf(acc, "mqar accuracy: %d/%d", &hits, &asked), 2);
    assert_true(asked == 48 && hits >= 45);
    const char *figs[] = {"kaczmarz", "kalman", "kata", "parallax", "recall"};
    for (int i = 0; i < 5; i++) {
        char f[1200];
        snprintf(f, sizeof f, "%s/mixscope-figures/tour-%s.png", dir, figs[i]);
        assert_true(file_size(f) > 10000);
        char line[2400], *whole = realpath(f, NULL); /* figure paths are printed whole */
        assert_non_null(whole);
        snprintf(line, sizeof line, "wrote %s", whole);
        free(whole);
        assert_non_null(strstr(out, line));
    }
    free(dir);
}

/* The embedded tour is scenes/tour.scene (scenes/embed.sh regenerates scenes/tour.c). */
extern const char *scene_tour(void);
static void test_tour_embedded_matches_file(void **state) {
    (void)state;
    char *text;
    size_t n;
    err e = {{0}};
    if (file_read_all("scenes/tour.scene", 1 << 20, &text, &n, &e)) fail_msg("%s", e.msg);
    if (strcmp(text, scene_tour()) != 0)
        fail_msg("scenes/tour.c is stale: run sh scenes/embed.sh after editing scenes/tour.scene");
    free(text);
}

/* edit-recall: erasing the key pair 3 was written under breaks the first query of 'z' and only
 * it; writing another value there makes it answer that value; the list replays */
static void test_scene_edit_recall(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("edit-recall", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    const char *l = find_line(out, "mqar accuracy: ", 0);
    assert_non_null(l);
    assert_non_null(strstr(l, "48/48"));
    assert_non_null(strstr(out, "erased key 9 at layer 0 head 0"));
    assert_non_null(strstr(out, "collateral over 33 other stored keys"));
    l = find_line(out, "mqar accuracy: ", 1);
    assert_non_null(strstr(l, "47/48"));
    assert_non_null(strstr(out, "missed: token 42 'z' -> '\\x88' (want '\\x8a'"));
    assert_non_null(strstr(out, "missed: token 42 'z' -> '\\xfa' (want '\\x8a'"));
    /* the replay after reset gives the write's numbers again: the last two loss lines agree */
    char lw[200], lr[200];
    line_with(out, "== instead, write", "next-token loss", lw, sizeof lw);
    line_with(out, "== the list replays", "next-token loss", lr, sizeof lr);
    assert_true(lw[0] != '\0');
    assert_string_equal(strstr(lw, "loss"), strstr(lr, "loss"));
    assert_png("edit-recall-erase.png");
    assert_png("edit-recall-write.png");
    free(out);
}

/* patch: A's state restored into B gives A's predictions; the KV cache of layer 1 carries the
 * pairs, that of layer 0 does not */
static void test_scene_patch(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("patch", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    /* run A's lines for tokens 24..29 and the patched B's are the same */
    for (int t = 24; t < 30; t++) {
        char key[32], la[200], lb[200];
        snprintf(key, sizeof key, "token %d ", t);
        line_with(out, "-- run A from token 24:", key, la, sizeof la);
        line_with(out, "restored a at position 24", key, lb, sizeof lb);
        assert_true(la[0] != '\0');
        assert_string_equal(la, lb);
    }
    int c[3], n[3];
    for (int i = 0; i < 3; i++) {
        const char *l = find_line(out, "mqar accuracy: ", i);
        assert_non_null(l);
        assert_int_equal(sscanf(l, "mqar accuracy: %d/%d", &c[i], &n[i]), 2);
    }
    assert_true(c[0] >= 45); /* B on its own */
    assert_true(c[1] >= 40); /* layer 0 from A */
    assert_true(c[2] <= 8);  /* layer 1 from A */
    free(out);
}

/* first-nan: the threshold stop at 29, the Inf at 480, the files, the chunk that parts */
static void test_scene_first_nan(void **state) {
    (void)state;
    int rc;
    char *out = run_scene("first-nan", &rc);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "stopped after token 29: layer 0 head 0 state_norm 1079"));
    assert_non_null(
        strstr(out, "stopped after token 480: first Inf at token 480, layer 0 (lane gdn)"));
    assert_non_null(strstr(out, "part in chunk 7 (tokens 448..480)"));
    assert_non_null(
        strstr(out, "first non-finite output: step token 480, parallel form token 477"));
    char p[600];
    snprintf(p, sizeof p, "%s/first-nan-step.safetensors", g_dir);
    assert_true(access(p, R_OK) == 0);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scene_edit_recall),
        cmocka_unit_test(test_scene_patch),
        cmocka_unit_test(test_scene_first_nan),
        cmocka_unit_test(test_a5_is_the_alternating_group),
        cmocka_unit_test(test_a5_prompt_targets_are_prefix_products),
        cmocka_unit_test(test_mqar_layout),
        cmocka_unit_test(test_niah_and_overwrite),
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_lane_recall_exact),
        cmocka_unit_test(test_scene_kaczmarz_vs_gdn),
        cmocka_unit_test(test_scene_kalman_gates),
        cmocka_unit_test(test_scene_kata_capacity),
        cmocka_unit_test(test_scene_parallax_cor),
        cmocka_unit_test(test_scene_mqar_recall),
        cmocka_unit_test(test_scene_unstable_state),
        cmocka_unit_test(test_tour),
        cmocka_unit_test(test_tour_embedded_matches_file),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
