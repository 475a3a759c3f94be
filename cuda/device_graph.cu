/* cuda/device_graph.cu - CUDA graphs of the device's stream: the work of a training step's forward
 * and backward captured once and replayed with one cudaGraphLaunch (the CUDA Programming Guide's
 * "CUDA Graphs"; Megatron-LM's --enable-cuda-graph), so the host pays one graph launch where it paid
 * a launch per kernel.
 *
 * Capture runs in cudaStreamCaptureModeThreadLocal: the calls CUDA forbids during a capture (a
 * stream or event wait, cudaMalloc) fail on this thread and invalidate it, and other threads (other
 * ranks of a test, the NCCL comm's watches) are not affected. The emulated build records and replays
 * the same calls (tests/cuda_emu/cuda_runtime.h), with the same refusals. */
#include "cuda/cuda_internal.h"

extern "C" int tri_cuda_capture_begin(tri_device *d)
{
    return TRI_CUDA(cudaStreamBeginCapture(tri_cuda_of(d)->stream, cudaStreamCaptureModeThreadLocal));
}

/* Ends the capture (always), instantiates the graph: *graph the executable graph, *nodes its nodes. */
extern "C" int tri_cuda_capture_end(tri_device *d, void **graph, int64_t *nodes)
{
    tri_cuda *c = tri_cuda_of(d);
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    size_t n = 0;
    *graph = NULL;
    *nodes = 0;
    int rc = TRI_CUDA(cudaStreamEndCapture(c->stream, &g));
    if (!rc) rc = TRI_CUDA(cudaGraphGetNodes(g, NULL, &n));
    if (!rc) rc = TRI_CUDA(cudaGraphInstantiate(&exec, g, 0));
    if (g)
        cudaGraphDestroy(g); /* the executable graph keeps its own copy */
    if (!rc) {
        *graph = exec;
        *nodes = (int64_t)n;
    }
    return rc;
}

extern "C" int tri_cuda_graph_launch(tri_device *d, void *graph)
{
    return TRI_CUDA(cudaGraphLaunch((cudaGraphExec_t)graph, tri_cuda_of(d)->stream));
}

extern "C" void tri_cuda_graph_free(tri_device *d, void *graph)
{
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
