"""The offline translator: a task's PyTorch reference traced with torch.fx and lowered to HIP."""
