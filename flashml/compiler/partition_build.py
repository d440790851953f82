"""The policy compiler's MLCache part: the partition network through emlearn (or the rule), its
sources and its manifest entry."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from flashml.compiler.bundle import (
    PARTITION_FILE,
)
from flashml.compiler.layout import (
    PARTITION_RULE,
    PARTITION_WRAPPER,
)
from flashml.compiler.toolchain import (
    WRAPPER_WARNINGS,
)
from flashml.features import partition as partition_contract
from flashml.files import sha256_file

log = logging.getLogger(__name__)



def _emlearn() -> Any:
    """emlearn, imported without its side effect: `emlearn.bayes` calls
    `numpy.seterr(all='raise')` at import, which would turn every later underflow in the
    process (scikit-learn's MLP predict, for one) into a FloatingPointError."""
    import numpy as np

    with np.errstate():  # restores numpy's error state on exit
        import emlearn
        import emlearn.net
    return emlearn


def _emlearn_include() -> Path:
    return Path(_emlearn().__file__).resolve().parent


def _partition_sources(build: Path, weights: list[Any], biases: list[Any],
                       contract_hash: str, sharpness: float = 1.0
                       ) -> list[tuple[Path, tuple[str, ...]]]:
    """MLCache's network as C: emlearn's generated layers and its eml_net inference
    (`partition_net.c`, compiled without warnings like TL2cgen's code: it is a library's
    output), and the ABI functions around it (`partition_wrapper.c`, -Wall -Wextra
    -Werror). The net file evaluates emlearn's layers with its own loop (faster, same
    results; see its comment) and activations on the stack, so flashml_partition is
    reentrant."""
    import numpy as np

    c_generate_net_loadable = _emlearn().net.c_generate_net_loadable
    c = partition_contract.contract()
    width = max(int(np.asarray(w).shape[1]) for w in weights)
    acts = ["relu"] * (len(weights) - 1) + ["identity"]
    net = c_generate_net_loadable(acts, [np.asarray(w) for w in weights],
                                  [np.asarray(b) for b in biases], prefix="flashml_pnet")
    net_c = build / "partition_net.c"
    net_c.write_text(f"""/* MLCache's partition network: emlearn {_emlearn_version()}'s layers
 * (weights, biases, activations), evaluated here. emlearn's own eml_net_forward walks the weights
 * output by output (stride n_outputs) with one dependent add chain per output: ~30 us for the
 * 176 x 64 x 16 network. This loop goes input by input over contiguous weights, so the
 * compiler vectorises across outputs; each output still sums w * x over the inputs in the
 * same order from 0.0f, then adds its bias, as eml_net_forward does: the same float32
 * results (zero inputs skipped: see below). Activations live on the caller's stack (emlearn
 * keeps them in statics). */
#include <eml_net.h>
{net}
#define FLASHML_PNET_WIDTH {width}
/* One body per ISA (GCC's target_clones: the loader's ifunc picks the widest the CPU has, so
 * the .so stays portable); -ffp-contract=off (the build's flags) keeps separate multiplies
 * and adds, so every width gives the same bits. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void flashml_pnet_layer(const EmlNetLayer *l, const float *in, float *out) {{
    for (int o = 0; o < l->n_outputs; o++) out[o] = 0.0f;
    for (int i = 0; i < l->n_inputs; i++) {{
        const float x = in[i];
        /* a zero input (absent streams' slots, ReLUs at 0: about half) adds w * 0 = +-0 to
         * a sum that started at +0.0f and so is never -0: skipping it changes no bit (the
         * weights are finite) and halves the work */
        if (x == 0.0f) continue;
        const float *w = l->weights + (long)i * l->n_outputs;
        for (int o = 0; o < l->n_outputs; o++) out[o] += w[o] * x;
    }}
    for (int o = 0; o < l->n_outputs; o++) {{
        out[o] += l->biases[o];
        if (l->activation == EmlNetActivationRelu) out[o] = out[o] <= 0.0f ? 0.0f : out[o];
    }}
}}
int flashml_partition_net(const float *in, float *out);
int flashml_partition_net(const float *in, float *out) {{
    float a[2][FLASHML_PNET_WIDTH];
    const float *x = in;
    const int n = flashml_pnet.n_layers;
    if (flashml_pnet.layers[0].n_inputs != {c.num_features} ||
        flashml_pnet.layers[n - 1].n_outputs != {c.max_streams}) return -1;
    for (int k = 0; k < n; k++) {{
        float *y = k == n - 1 ? out : a[k % 2];
        flashml_pnet_layer(&flashml_pnet.layers[k], x, y);
        x = y;
    }}
    return 0;
}}
""")
    wrap = build / "partition_wrapper.c"
    wrap.write_text(PARTITION_WRAPPER.read_text()
                    .replace("@PARTITION_CONTRACT_HASH@", contract_hash)
                    .replace("@PARTITION_SHARPNESS@", float(sharpness).hex()))
    return [(net_c, ("-w", "-O3", "-ffp-contract=off")), (wrap, WRAPPER_WARNINGS)]


def _partition_rule_sources(build: Path, contract_hash: str
                            ) -> list[tuple[Path, tuple[str, ...]]]:
    """MLCache's partition rule "previous_optimal" (no network): the last interval's best
    split, searched in C on the monitor's histograms (`partition_rule.c.in`)."""
    src = build / "partition_rule.c"
    src.write_text(PARTITION_RULE.read_text().replace("@PARTITION_CONTRACT_HASH@",
                                                      contract_hash))
    return [(src, WRAPPER_WARNINGS)]


def _emlearn_version() -> str:
    from importlib.metadata import version

    return version("emlearn")


def _partition_manifest(pp: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The manifest's partition fields: `partition_contract_hash` (top level) and
    `partition` (the contract, the network's shape, its parameters and metrics)."""
    c = partition_contract.contract()
    return {
        "partition_contract_hash": pp["contract_hash"],
        "partition": {"contract": {"name": c.name, "version": c.version,
                                   "max_streams": c.max_streams, "steps": c.steps,
                                   "num_features": c.num_features},
                      **({"network": {"file": PARTITION_FILE,
                                      "sha256": sha256_file(folder / PARTITION_FILE),
                                      "emlearn": _emlearn_version(),
                                      "arithmetic": "float32"}}
                         if pp["rule"] == "network" else {}),
                      **pp},
    }
