"""The CUDA -> CPU scope of the CPU compatibility layer: inside `cpu_scope()` a library function's requests for
CUDA (a device, a stream, an RNG state, a backward pass it nests) are served on the CPU, through a torch function
mode; with CPU_COMPAT_TRACE=1 each distinct request is printed with the library line that made it. Torch is imported
inside the functions."""

from __future__ import annotations

import contextlib
import os
import sys
from types import FrameType
from typing import Any, Iterator, Optional

#: CPU_COMPAT_TRACE=1 prints each distinct CUDA request served on the CPU, with the library line that made it.
TRACE_ENV = "CPU_COMPAT_TRACE"


_SEEN: set[tuple[str, str]] = set()
# Frames of this package (the scope and the patches' wrappers) and of contextlib are skipped to find the library line.
_HERE = (os.path.dirname(contextlib.__file__), os.path.dirname(__file__))


def _trace(what: str) -> None:
    if os.environ.get(TRACE_ENV) != "1":
        return
    frame: Optional[FrameType] = sys._getframe(2)
    import torch

    skip = _HERE + (os.path.dirname(torch.__file__),)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    where = (
        "?"
        if frame is None
        else (f"{frame.f_code.co_filename.split('site-packages/')[-1]}:{frame.f_lineno} ({frame.f_code.co_name})")
    )
    if (what, where) not in _SEEN:
        _SEEN.add((what, where))
        print(f"[cpu-compat rank {os.environ.get('RANK', '0')}] {what} <- {where}", file=sys.stderr, flush=True)


def _means_cuda(device: Any) -> bool:
    import torch

    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True  # Megatron passes torch.cuda.current_device() as a bare index
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


def _cuda_as_cpu_mode() -> Any:
    import torch
    from torch.overrides import TorchFunctionMode

    class CudaAsCpu(TorchFunctionMode):
        """Inside a wrapped function: device='cuda' or an index means the CPU, Tensor.cuda()/.to('cuda') stay on
        the CPU, pin_memory is off, and Tensor.type() names the torch.cuda type that Megatron's checks expect."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.autograd.backward or func is torch.Tensor.backward:
                return _backward_in_mode(self, func, args, dict(kwargs or {}))
            kwargs = dict(kwargs or {})
            if _means_cuda(kwargs.get("device")):
                _trace(f"{getattr(func, '__name__', func)}(device=cuda)")
                kwargs["device"] = "cpu"
            if kwargs.get("pin_memory"):
                _trace(f"{getattr(func, '__name__', func)}(pin_memory=True)")
                kwargs["pin_memory"] = False
            if func is torch.Tensor.cuda:
                _trace("Tensor.cuda()")
                return args[0]
            if func is torch.Tensor.to and len(args) > 1 and _means_cuda(args[1]):
                _trace("Tensor.to(cuda)")
                args = (args[0], "cpu", *args[2:])
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                name = func(*args)
                return name if ".cuda." in name else name.replace("torch.", "torch.cuda.", 1)
            return func(*args, **kwargs)

    return CudaAsCpu()


def _backward_in_mode(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """Run a backward pass reached through the mode with the mode still active.

    torch 2.13's `torch.autograd.backward` (and `Tensor.backward`) dispatch to `__torch_function__`, and torch pops
    a mode while its own handler runs, so a plain `func(*args)` here would run the whole backward outside the mode.
    That is what Megatron's full recomputation does: `CheckpointFunction.backward` (tensor_parallel/random.py)
    recomputes the layer and calls `torch.autograd.backward` on it, and with sequence parallelism the recomputed
    all-gather (mappings.py `_gather_along_first_dim`) asks for a buffer on `torch.cuda.current_device()`. The engine
    entry point below does not dispatch, so the mode can be re-entered around it without recursing; the argument
    handling is `torch.autograd.backward`'s own (the helpers it calls).
    """
    import torch
    from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
    from torch.autograd.graph import _engine_run_backward

    if func is torch.Tensor.backward:
        tensor, *rest = args
        names: tuple[str, ...] = ("gradient", "retain_graph", "create_graph", "inputs")
        options = {**dict(zip(names, rest, strict=False)), **kwargs}
        tensors: tuple = (tensor,)
        grads, inputs = options.get("gradient"), options.get("inputs")
    else:
        first, *rest = args
        names = ("grad_tensors", "retain_graph", "create_graph", "grad_variables", "inputs")
        options = {**dict(zip(names, rest, strict=False)), **kwargs}
        tensors = (first,) if isinstance(first, torch.Tensor) else tuple(first)
        grads, inputs = options.get("grad_tensors"), options.get("inputs")
    if inputs is None:
        inputs_tuple: tuple = ()
    else:
        inputs_tuple = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    create_graph = bool(options.get("create_graph", False))
    retain_graph = options.get("retain_graph")
    if retain_graph is None:
        retain_graph = create_graph
    with mode:
        grad_tensors = _make_grads(tensors, _tensor_or_tensors_to_tuple(grads, len(tensors)), is_grads_batched=False)
        _engine_run_backward(
            tensors,
            grad_tensors,
            retain_graph,
            create_graph,
            inputs_tuple,
            allow_unreachable=True,
            accumulate_grad=True,
        )
    return None


@contextlib.contextmanager
def cpu_scope() -> Iterator[None]:
    """While it is active, CUDA requests mean the CPU: the mode above, plus torch.cuda.current_device() -> 0,
    torch.cuda.Stream() -> None (torch.cuda.stream(None) is a documented no-op) and synchronize() -> nothing."""
    import torch

    def current_device() -> int:
        _trace("torch.cuda.current_device()")
        return 0

    def stream(*args: Any, **kwargs: Any) -> None:
        _trace("torch.cuda.Stream()")

    def synchronize(*args: Any, **kwargs: Any) -> None:
        _trace("torch.cuda.synchronize()")

    replaced = {"current_device": current_device, "Stream": stream, "synchronize": synchronize}
    saved = {name: getattr(torch.cuda, name) for name in replaced}
    for name, value in replaced.items():
        setattr(torch.cuda, name, value)
    try:
        with _cuda_as_cpu_mode():
            yield
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)
