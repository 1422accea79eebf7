"""Outputs from a contestant to the judge, as plain data (worker side; never pickle).

GPU, three ways (``WAYS``), chosen by the sandbox (``pool.output_transfer``):

* "torch": a CUDA IPC handle by torch's own ``_share_cuda_``, which keeps the handle's reference count
  in a shared-memory object of ``/dev/shm``: where that ``/dev/shm`` is bwrap's private one, or with no
  sandbox at all.
* "driver": a handle of the output's allocation by the CUDA driver itself (``cuda_ipc``), no reference
  count, so nothing is written: Landlock alone, where ``/dev/shm`` is the host's and stays closed. An
  output the driver cannot hand over (memory of a kind IPC does not cover) goes as a file instead.
* "file": the raw bytes in a file of the contestant's scratch folder (always on the CPU).

Handles are legal because judge and contestants share one pid namespace; the judge maps each, copies
the bytes into its own memory at once and unmaps it. Either way the judge checks what arrives against
the shape and dtype it expects before it reads a byte, and nothing that arrives is ever unpickled or
executed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import torch

from autokernel_tui.harness.worker import cuda_ipc

WAYS = ("torch", "driver", "file")
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
    torch.int64, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}


class TransferError(ValueError):
    pass


def describe(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "device": t.device.type}


def export(outs: tuple, scratch: Path, tag: str, way: str = "torch") -> list[dict[str, Any]]:
    """What the judge needs to read each output (contestant side). Keep ``outs`` alive until it has.
    ``way``: how CUDA outputs travel (``WAYS``); CPU ones always as files."""
    if way not in WAYS:
        raise ValueError(f"way must be one of {', '.join(WAYS)}, not {way!r}")
    descs = []
    for i, t in enumerate(outs):
        d = describe(t)
        if t.is_cuda and way == "driver" and (handle := _driver_export(t)) is not None:
            d["driver_ipc"] = handle
        elif t.is_cuda and way == "torch":
            from torch.multiprocessing.reductions import reduce_tensor
            _, args = reduce_tensor(t.detach())
            (_, size, stride, offset, _, _, device, handle, storage_bytes, storage_offset, _, rc_handle,
             rc_offset, event_handle, event_sync) = args
            d["ipc"] = {"size": list(size), "stride": list(stride), "offset": int(offset), "device": int(device),
                        "handle": handle.hex(), "storage_bytes": int(storage_bytes),
                        "storage_offset": int(storage_offset), "rc_handle": rc_handle.hex(),
                        "rc_offset": int(rc_offset), "event_handle": event_handle.hex() if event_handle else "",
                        "event_sync": bool(event_sync)}
        else:
            path = scratch / f"out-{tag}-{i}.bin"
            flat = t.detach().contiguous().reshape(-1).cpu()
            flat.view(torch.uint8).numpy().tofile(path)
            d["file"] = path.name
            d["nbytes"] = flat.numel() * flat.element_size()
        descs.append(d)
    return descs


def _driver_export(t: torch.Tensor) -> dict[str, Any] | None:
    try:
        return cuda_ipc.export(t.detach())
    except cuda_ipc.CudaIpcError:  # e.g. memory of a kind IPC does not cover: this one goes as a file
        return None


def receive(descs: list[dict[str, Any]], expected: list[dict[str, Any]], scratch: Path, way: str = "torch") -> tuple:
    """The outputs as the judge's own tensors (judge side). Raises TransferError on anything unexpected,
    a handle of a kind other than ``way``'s included (files are always taken: export falls back to them).
    (torch's handle names a shared-memory object the judge opens and writes a count in: under Landlock
    alone one named by a contestant could be another program's.)"""
    if not isinstance(descs, list) or len(descs) != len(expected):
        raise TransferError(f"returned {len(descs) if isinstance(descs, list) else '?'} output(s), "
                            f"expected {len(expected)}")
    outs = []
    for i, (d, want) in enumerate(zip(descs, expected)):
        if not isinstance(d, dict) or list(d.get("shape", ())) != list(want["shape"]) \
                or d.get("dtype") != want["dtype"]:
            raise TransferError(f"output {i} arrived as {d.get('shape') if isinstance(d, dict) else d} "
                                f"{d.get('dtype') if isinstance(d, dict) else ''}, expected {want['shape']} "
                                f"{want['dtype']}")
        dtype = DTYPES.get(d["dtype"])
        if dtype is None:
            raise TransferError(f"output {i}: dtype {d['dtype']!r} not supported")
        kind = "driver" if "driver_ipc" in d else "torch" if "ipc" in d else "file"
        if kind not in (way, "file"):
            raise TransferError(f"output {i} arrived by {kind} IPC, but this sandbox hands outputs over by {way}")
        if kind == "driver":
            outs.append(_receive_driver_ipc(d["driver_ipc"], dtype, want))
        elif kind == "torch":
            outs.append(_receive_ipc(d["ipc"], dtype, want))
        else:
            outs.append(_receive_file(d, dtype, scratch, want))
    return tuple(outs)


def _receive_file(d: dict, dtype: torch.dtype, scratch: Path, want: dict) -> torch.Tensor:
    name = str(d.get("file", ""))
    if not name or os.sep in name or name.startswith("."):
        raise TransferError(f"output file {name!r} is not in the contestant's scratch folder")
    numel = 1
    for n in d["shape"]:
        numel *= int(n)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    try:  # never through a link the contestant planted: only a plain file of its own folder
        # (O_NONBLOCK: a FIFO planted in its place would otherwise hold the judge at open until its deadline)
        fd = os.open(scratch / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise TransferError(f"output file {name!r}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise TransferError(f"output file {name} is not a plain file")
        if size != nbytes or int(d.get("nbytes", -1)) != nbytes:
            raise TransferError(f"output file {name} holds {size} bytes, expected {nbytes}")
        data = bytearray(fh.read(nbytes))
    os.unlink(scratch / name)
    device = "cuda" if want.get("device") == "cuda" else "cpu"  # where the judge's reference lives
    if nbytes == 0:
        return torch.empty(d["shape"], dtype=dtype, device=device)
    return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(d["shape"]).to(device)


def _receive_ipc(ipc: dict, dtype: torch.dtype, want: dict) -> torch.Tensor:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor
    try:
        size, stride = [int(n) for n in ipc["size"]], [int(n) for n in ipc["stride"]]
        if size != list(want["shape"]):
            raise TransferError(f"IPC tensor of shape {size}, expected {want['shape']}")
        view = rebuild_cuda_tensor(torch.Tensor, torch.Size(size), tuple(stride), int(ipc["offset"]),
                                   torch.storage.TypedStorage, dtype, int(ipc["device"]),
                                   bytes.fromhex(ipc["handle"]), int(ipc["storage_bytes"]),
                                   int(ipc["storage_offset"]), False, bytes.fromhex(ipc["rc_handle"]),
                                   int(ipc["rc_offset"]), bytes.fromhex(ipc["event_handle"]) or None,
                                   bool(ipc["event_sync"]))
        # The last element the view reaches must lie inside the storage it maps.
        reach = int(ipc["offset"]) + sum((n - 1) * s for n, s in zip(size, stride) if n > 0)
        if min(stride, default=0) < 0 or (view.numel() and (reach + 1) * view.element_size() > int(ipc["storage_bytes"])):
            raise TransferError("IPC tensor reaches outside its storage")
        copy = view.clone()  # our own memory, now: the contestant can no longer change what we check
        torch.cuda.synchronize()
        del view
        return copy
    except TransferError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise TransferError(f"cannot map the output's CUDA IPC handle: {type(exc).__name__}: {exc}") from None


def _receive_driver_ipc(desc: dict, dtype: torch.dtype, want: dict) -> torch.Tensor:
    if not isinstance(desc, dict) or list(desc.get("size", ())) != list(want["shape"]):
        raise TransferError(f"IPC tensor of shape {desc.get('size') if isinstance(desc, dict) else '?'}, "
                            f"expected {want['shape']}")
    if want.get("device") != "cuda":
        raise TransferError("a CUDA IPC handle for an output the judge expects on the CPU")
    try:
        return cuda_ipc.receive(desc, dtype)
    except (cuda_ipc.CudaIpcError, RuntimeError) as exc:
        raise TransferError(f"cannot map the output's CUDA IPC handle: {exc}") from None
