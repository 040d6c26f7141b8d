"""Host time of one eager training step of Triton 4.1's MLP and PyTorch's, and a cProfile of ours.
Runs the notebook's code cells up to the one defining make_triton in a fresh kernel, then the probe below.
usage (repo root, on a GPU, MNIST_DIR set): python3 triton/04-mnist-classifier/experiments/host_profile.py [STEPS]
Output of two H200 runs: host_profile.txt beside this file."""
import sys

import nbclient
import nbformat

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
nb = nbformat.read("triton/04-mnist-classifier/01_mnist_mlp.ipynb", as_version=4)
cells = []
for c in nb.cells:
    if c.cell_type == "code":
        cells.append(nbformat.v4.new_code_cell(c.source))
        if "def make_triton" in c.source:
            break
probe = f'''
import cProfile, pstats, time
STEPS = {STEPS}
xb, yb = x_train[:BATCH_RUN], y_train[:BATCH_RUN]
variants = {{"triton": make_triton(ref_model)[1], "torch": make_torch(ref_model)[1]}}
for s in variants.values():
    for _ in range(20):
        s(xb, yb)
sync = torch.cuda.synchronize if env.gpu else (lambda: None)
sync()
for rnd in range(3):
    for name, s in variants.items():
        t0 = time.perf_counter()
        for _ in range(STEPS):
            s(xb, yb)
        sync()
        print(f"round {{rnd}} {{name:7}} {{(time.perf_counter() - t0) / STEPS * 1e6:8.1f}} us per step")
for name, s in variants.items():
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(STEPS):
        s(xb, yb)
    sync()
    pr.disable()
    print("=====", name)
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)
'''
cells.append(nbformat.v4.new_code_cell(probe))
nb.cells = cells
client = nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3",
                                 resources={"metadata": {"path": "triton/04-mnist-classifier"}})
client.execute()
for o in nb.cells[-1].outputs:
    print(o.get("text", ""), end="")
