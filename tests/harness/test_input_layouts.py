"""Fresh contents keep an input's recorded layout: gaps (a view of a packed projection) and broadcast dims (a
class token expanded over the batch). A generated starter is made for the layout the model passes; the
harness had handed it TensorIterator's dense copy, and the ViT's starters FAILed their smoke check."""

import torch

from autokernel_tui.harness.worker.inputs import perturb, refill_


def _layouts():
    g = torch.Generator().manual_seed(0)
    packed = torch.randn(2, 17, 3, 2, 16, generator=g)[:, :, 0].transpose(1, 2)  # q of a qkv: strided, gaps
    token = torch.randn(1, 1, 32, generator=g).expand(2, 1, 32)  # stride 0 over the batch
    return packed, token


def test_fresh_contents_keep_gaps_and_broadcast_dims():
    packed, token = _layouts()
    assert packed.stride() == (1632, 16, 96, 1) and token.stride() == (0, 32, 1)
    new_packed, new_token = perturb((packed, token), 7, torch.device("cpu"))
    assert new_packed.stride() == packed.stride() and new_token.stride() == token.stride()
    assert not torch.equal(new_packed, packed) and not torch.equal(new_token, token)
    ratio = new_packed / packed  # each element its own factor in [0.5, 1.5)
    assert bool(((ratio >= 0.5) & (ratio < 1.5)).all())
    assert torch.equal(new_token[0], new_token[1])  # still one token for every batch element
    ids = torch.arange(17).expand(2, 17)  # position ids, broadcast: permuted, still broadcast
    (new_ids,) = perturb((ids,), 9, torch.device("cpu"))
    assert new_ids.stride() == ids.stride() and sorted(new_ids[0].tolist()) == list(range(17))


def test_refill_writes_a_broadcast_input_through_the_memory_it_has():
    packed, token = _layouts()
    fresh = perturb((packed, token), 8, torch.device("cpu"))
    ptrs = (packed.data_ptr(), token.data_ptr())
    refill_((packed, token), fresh)
    assert (packed.data_ptr(), token.data_ptr()) == ptrs
    assert torch.equal(packed, fresh[0]) and torch.equal(token, fresh[1])
