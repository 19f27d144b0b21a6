"""FlashQLA's chunk_gated_delta_rule (QwenLM/FlashQLA, TileLang kernels for sm90 and sm100): a
strong baseline of gated_delta_net (task.toml [[baselines]]). TileLang compiles each shape at
its first call (30-45 s a case on an H100), inside the baseline's correctness check, untimed."""

import torch.nn as nn

try:
    from flash_qla import chunk_gated_delta_rule
except ImportError as e:
    raise ImportError(f"FlashQLA not installed (pip install flash-qla): {e}"[:200]) from None
except Exception as e:  # noqa: BLE001 (it refuses GPUs other than sm90/sm100 at import)
    raise ImportError(f"FlashQLA not usable here: {type(e).__name__}: {e}"[:200]) from None


class Model(nn.Module):
    def forward(self, q, k, v, g, beta, initial_state, cu_seqlens=None):  # noqa: ANN001, ANN201
        return chunk_gated_delta_rule(
            q,
            k,
            v,
            g,
            beta,
            scale=q.shape[-1] ** -0.5,
            initial_state=initial_state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=False,
            cu_seqlens=cu_seqlens,
        )
