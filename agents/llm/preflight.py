"""Before a run writes anything: can every model named be called? A provider litellm knows, its
key in the environment (a self-hosted api_base gets a placeholder), an api_base that accepts
connections. One-line UserErrors; no request is sent to a model, and litellm is imported only
once the cheap checks pass.
"""

from __future__ import annotations

import difflib
import os
import socket
from urllib.parse import urlsplit

from hipevolve.agents.llm.client import load_litellm
from hipevolve.core.config import ModelSettings
from hipevolve.core.errors import UserError


def check_models(settings: ModelSettings) -> None:
    """The model settings' one check before anything is written: an api_base needs a model, and
    every model named must be callable (check_model). One-line UserErrors."""
    if settings.api_base and not settings.models():
        raise UserError("--api-base needs --model", "pass e.g. --model openai/<served name>")
    for model in settings.models():
        check_model(model, settings.api_base)


def check_model(model: str, api_base: str | None = None, timeout_s: float = 3.0) -> str:
    """Checks before a search that the model can be called; returns its provider.

    Raises one-line UserErrors: litellm knows no provider for the name; the provider's key is
    not in the environment (not required with api_base: a self-hosted server gets a placeholder);
    the api_base server does not accept connections. Sends no request to a model.
    """
    provider = _known_provider(model, api_base)
    if provider is not None:
        return provider  # answered without importing litellm
    litellm = load_litellm()
    try:
        _, provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
    except Exception:
        raise UserError(
            f"unknown model {model!r}: litellm knows no provider for it",
            "write it as provider/name, e.g. anthropic/claude-sonnet-4-5, or openai/<name> with "
            "--api-base for a local OpenAI-compatible server",
        ) from None
    missing = litellm.validate_environment(model, api_base=api_base)["missing_keys"]
    if api_base is None and missing:
        raise UserError(
            f"model {model!r} (provider {provider}) needs {', '.join(missing)} in the environment",
            f"export {missing[0]}=..., or drop --model to run the offline policies",
        )
    if api_base is not None:
        _reachable(api_base, timeout_s)
    return provider


# The key variable of the providers most models are named with, so the usual mistakes (a key
# not exported, a misspelt provider) are answered at once: importing litellm takes 3 to 20 s.
KEY_VARIABLES = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY",
    "xai": "XAI_API_KEY",
    "fireworks_ai": "FIREWORKS_AI_API_KEY",
}


def _known_provider(model: str, api_base: str | None) -> str | None:
    """The provider of `model` when it is one of KEY_VARIABLES' and its key is exported (None:
    litellm must decide); one-line UserError for a missing key or a misspelt provider."""
    if api_base is not None or "/" not in model:
        return None
    provider = model.split("/", 1)[0]
    if provider not in KEY_VARIABLES:
        close = difflib.get_close_matches(provider, KEY_VARIABLES, n=1, cutoff=0.75)
        if close:
            raise UserError(
                f"unknown model {model!r}: no provider {provider!r}",
                f"did you mean {close[0]}/{model.split('/', 1)[1]}?",
            )
        return None
    variable = KEY_VARIABLES[provider]
    if not os.environ.get(variable):
        raise UserError(
            f"model {model!r} (provider {provider}) needs {variable} in the environment",
            f"export {variable}=..., or drop --model to run the offline policies",
        )
    return provider


def _reachable(api_base: str, timeout_s: float) -> None:
    parts = urlsplit(api_base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(
            f"api base {api_base!r} is not an http(s) URL", "pass e.g. http://127.0.0.1:8000/v1"
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        reason = "connection refused"
    except TimeoutError:
        reason = f"no answer within {timeout_s:g} s"
    except OSError as e:  # DNS failure, no route
        reason = e.strerror or str(e)
    else:
        return
    raise UserError(
        f"cannot reach the model server at {api_base}: {reason}",
        "start the server, or fix --api-base",
    )
