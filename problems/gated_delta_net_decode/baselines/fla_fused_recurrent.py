"""FLA's fused_recurrent_gated_delta_rule (flash-linear-attention's Triton decode kernel): a
strong baseline of gated_delta_net_decode (task.toml [[baselines]]), called as
bench/gdn_vs_fla.py calls it, with FLA's backend dispatch off (FLA's own kernel)."""

import os

import torch.nn as nn

os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"  # before FLA reads it at import
try:
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
except Exception as e:  # noqa: BLE001 (any import failure: the baseline is not available)
    raise ImportError(
        f"FLA not installed (pip install flash-linear-attention): {type(e).__name__}: {e}"[:200]
    ) from None


class Model(nn.Module):
    def forward(self, q, k, v, g, beta, state):  # noqa: ANN001, ANN201
        return fused_recurrent_gated_delta_rule(
            q,
            k,
            v,
            g=g,
            beta=beta,
            scale=q.shape[-1] ** -0.5,
            initial_state=state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=False,
        )
