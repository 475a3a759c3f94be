/* tests/gpu/test_gpu_graph.c - device graphs on the CUDA backend (engine/device/device.h "graphs",
 * cuda/device_graph.cu) and the trainer's use of them (engine/train/step_graph.h).
 *
 * On a GPU these run CUDA's own stream capture; in the emulated build (test_gpu_graph_emu) the
 * capture of tests/cuda_emu/cuda_runtime.h. Either way: captured work does not run until the graph
 * is launched and then runs in order, with the arguments it was captured with, once per launch
 * (checked on exact values: small integers and halves, which every op here computes exactly); a host
 * wait, a device allocation or an upload inside a capture fails, the capture ends invalid, and the
 * device goes on working; a pass that waits inside a training step's capture is reported naming
 * --enable-cuda-graph and the device's error; the CPU backend refuses to capture. */
#include <criterion/criterion.h>
#include <string.h>

#include "cuda/device_cuda.h"
#include "engine/train/schedule.h"
#include "engine/train/step_graph.h"
#include "tests/gpu/gpuutil.h"
#include "tests/opsutil.h"

static tri_device *gpu;

static void setup(void)
{
    cr_assert_eq(tri_device_cuda_create(&gpu, 0), TRI_OK, "%s", tri_error_message());
}

static void teardown(void)
{
    ot_teardown();
    tri_device_destroy(gpu);
    gpu = NULL;
}

TestSuite(gpu_graph, .init = setup, .fini = teardown);

int main(int argc, char **argv)
{
    return gpu_criterion_main(argc, argv);
}

/* n floats all equal to v, on the GPU. */
static tri_tensor filled(int64_t n, float v)
{
    float *h = ot_floats((size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = v;
    return ot_tensor(gpu, tri_tensor_1d(NULL, TRI_F32, n), h);
}

static void expect_all(tri_tensor t, float want, const char *what)
{
    float *h = ot_read(gpu, t);
    for (int64_t i = 0; i < tri_tensor_numel(t); i++)
        cr_assert_eq(h[i], want, "%s[%lld] = %.9g, expected %.9g", what, (long long)i, h[i], want);
}

Test(gpu_graph, captured_work_runs_only_when_launched_in_order)
{
    int64_t n = 1037, M = 5, K = 7, N = 3;
    tri_tensor x = filled(n, 2.0f), y = filled(n, 3.0f), z = filled(n, -1.0f);
    tri_tensor a = ot_tensor(gpu, tri_tensor_2d(NULL, TRI_F32, M, K), NULL);
    tri_tensor b = ot_tensor(gpu, tri_tensor_2d(NULL, TRI_F32, K, N), NULL);
    tri_tensor c = ot_tensor(gpu, tri_tensor_2d(NULL, TRI_F32, M, N), NULL);
    cr_assert_eq(tri_op_fill(gpu, a, 1.0f), TRI_OK);
    cr_assert_eq(tri_op_fill(gpu, b, 0.5f), TRI_OK);
    cr_assert_eq(tri_op_fill(gpu, c, 0.0f), TRI_OK);
    cr_assert(tri_device_can_capture(gpu));

    cr_assert_eq(tri_device_capture_begin(gpu), TRI_OK, "%s", tri_error_message());
    float alpha = 1.0f; /* a host scalar: the graph keeps the value it was captured with */
    cr_assert_eq(tri_op_axpy(gpu, y, alpha, x), TRI_OK, "%s", tri_error_message());   /* y += x */
    alpha = 100.0f;
    cr_assert_eq(tri_op_scale(gpu, y, 0.5f), TRI_OK, "%s", tri_error_message());     /* y *= 0.5 */
    cr_assert_eq(tri_op_copy(gpu, z, y), TRI_OK, "%s", tri_error_message());         /* z = y */
    cr_assert_eq(tri_op_matmul(gpu, c, a, b, tri_tensor_none(), false, false, 1.0f), TRI_OK, "%s",
                 tri_error_message());                                                 /* c += a b */
    tri_device_graph *g = NULL;
    int64_t nodes = 0;
    cr_assert_eq(tri_device_capture_end(gpu, &g, &nodes), TRI_OK, "%s", tri_error_message());
    cr_assert_not_null(g);
    cr_assert_geq(nodes, 4, "4 ops captured as %lld nodes", (long long)nodes);
    (void)alpha;

    /* nothing ran yet */
    expect_all(y, 3.0f, "y before the launch");
    expect_all(z, -1.0f, "z before the launch");
    expect_all(c, 0.0f, "c before the launch");
    /* each launch runs all four, in capture order, with alpha 1 */
    cr_assert_eq(tri_device_graph_launch(gpu, g), TRI_OK, "%s", tri_error_message());
    expect_all(y, 2.5f, "y after one launch");  /* (3 + 2) / 2 */
    expect_all(z, 2.5f, "z after one launch");
    expect_all(c, 3.5f, "c after one launch");  /* K x 1 x 0.5 */
    cr_assert_eq(tri_device_graph_launch(gpu, g), TRI_OK, "%s", tri_error_message());
    expect_all(y, 2.25f, "y after two launches"); /* (2.5 + 2) / 2 */
    expect_all(z, 2.25f, "z after two launches");
    expect_all(c, 7.0f, "c after two launches");
    tri_device_graph_free(gpu, g);
}

/* Starts a capture with one op queued. */
static void begin_with_op(tri_tensor y)
{
    cr_assert_eq(tri_device_capture_begin(gpu), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_op_scale(gpu, y, 2.0f), TRI_OK, "%s", tri_error_message());
}

/* The capture ends invalid: no graph, the device's error naming the capture. */
static void expect_invalid_end(const char *what)
{
    tri_device_graph *g = NULL;
    int rc = tri_device_capture_end(gpu, &g, NULL);
    cr_assert_neq(rc, TRI_OK, "%s: the capture ended valid", what);
    cr_assert_null(g);
    cr_assert(strstr(tri_error_message(), "Capture"), "%s: %s", what, tri_error_message());
}

Test(gpu_graph, a_wait_or_an_allocation_inside_a_capture_is_caught)
{
    tri_tensor y = filled(64, 1.0f);
    float host[64];

    begin_with_op(y); /* a read of the device (a copy and a wait) */
    int rc = tri_device_copy_to_host(gpu, host, y);
    cr_assert_neq(rc, TRI_OK, "a copy to the host inside a capture succeeded");
    cr_assert(strstr(tri_error_message(), "Capture"), "%s", tri_error_message());
    expect_invalid_end("copy_to_host");

    begin_with_op(y); /* a plain wait */
    cr_assert_neq(tri_device_sync(gpu), TRI_OK, "a sync inside a capture succeeded");
    expect_invalid_end("sync");

    begin_with_op(y); /* an allocation */
    void *p = NULL;
    cr_assert_neq(tri_device_alloc(gpu, &p, 4096), TRI_OK, "cudaMalloc inside a capture succeeded");
    cr_assert_null(p);
    expect_invalid_end("alloc");

    begin_with_op(y); /* an upload: it would replay its staging slot's old bytes */
    cr_assert_eq(tri_device_copy_from_host(gpu, y, host), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "inside a graph capture"), "%s", tri_error_message());
    tri_device_graph *g = NULL;
    cr_assert_eq(tri_device_capture_end(gpu, &g, NULL), TRI_OK, "%s", tri_error_message());
    tri_device_graph_free(gpu, g); /* never launched: y keeps its value */

    /* none of the ops captured above ran, and the device works as before */
    expect_all(y, 1.0f, "y after the failed captures");
    cr_assert_eq(tri_op_scale(gpu, y, 3.0f), TRI_OK, "%s", tri_error_message());
    expect_all(y, 3.0f, "y after a plain op");
}

/* A pass for tri_step_graph_run: y += 1, and with `wait` a host wait after it. */
typedef struct pass_ctx {
    tri_tensor y, one;
    bool wait;
    int calls;
} pass_ctx;

static int pass(void *ctx)
{
    pass_ctx *p = ctx;
    p->calls++;
    int rc = tri_op_axpy(gpu, p->y, 1.0f, p->one);
    return rc || !p->wait ? rc : tri_device_sync(gpu);
}

Test(gpu_graph, step_graph_captures_on_the_second_step_and_replays)
{
    tri_step_graph g;
    tri_step_graph_init(&g, gpu);
    pass_ctx p = {.y = filled(300, 0.0f), .one = filled(300, 1.0f)};
    for (int step = 1; step <= 4; step++) {
        tri_step_graph_begin_step(&g);
        for (int mb = 0; mb < 2; mb++) /* two micro-batches through the same slot: one graph */
            cr_assert_eq(tri_step_graph_run(&g, TRI_SCHED_FWD, 0, 0, 0.5f, pass, &p), TRI_OK, "%s",
                         tri_error_message());
    }
    expect_all(p.y, 8.0f, "y after 4 steps of 2 passes");
    cr_assert_eq(p.calls, 3, "the pass ran eagerly twice (step 1) and once under capture, then only its graph "
                 "(%d calls)", p.calls);
    cr_assert_eq(g.captures, 1);
    cr_assert_eq(g.launches, 6);
    /* another loss scale is another graph */
    tri_step_graph_begin_step(&g);
    cr_assert_eq(tri_step_graph_run(&g, TRI_SCHED_FWD, 0, 0, 0.25f, pass, &p), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(g.captures, 2);
    expect_all(p.y, 9.0f, "y after a pass with another dloss");
    tri_step_graph_free(&g);
}

Test(gpu_graph, step_graph_reports_a_wait_inside_the_captured_pass)
{
    tri_step_graph g;
    tri_step_graph_init(&g, gpu);
    pass_ctx p = {.y = filled(16, 0.0f), .one = filled(16, 1.0f), .wait = true};
    tri_step_graph_begin_step(&g);
    cr_assert_eq(tri_step_graph_run(&g, TRI_SCHED_BWD, 0, 1, 1.0f, pass, &p), TRI_OK, "eager: %s",
                 tri_error_message());
    tri_step_graph_begin_step(&g);
    int rc = tri_step_graph_run(&g, TRI_SCHED_BWD, 0, 1, 1.0f, pass, &p);
    cr_assert_neq(rc, TRI_OK, "a pass that waits was captured");
    const char *msg = tri_error_message();
    cr_assert(strstr(msg, "--enable-cuda-graph: capturing the backward of chunk 0, slot 1") && strstr(msg, "Capture"),
              "%s", msg);
    cr_assert_eq(g.captures, 0);
    expect_all(p.y, 1.0f, "y: the failed capture ran nothing");
    tri_step_graph_free(&g);
}

Test(gpu_graph, the_cpu_device_cannot_capture)
{
    tri_device *cpu = ot_device(1);
    cr_assert_not(tri_device_can_capture(cpu));
    cr_assert_eq(tri_device_capture_begin(cpu), TRI_ENOTSUP);
    cr_assert(strstr(tri_error_message(), "cannot capture graphs"), "%s", tri_error_message());
}
