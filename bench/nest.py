"""Runs a function DEPTH Python frames deep, each frame holding a few locals as a model's forward
does: for the loops that time what a call's Python stack costs (torch_op_loop.py,
cuda_stack_loop.py). at_depth(d, fn) returns fn()'s result from d frames of at_depth."""


def at_depth(depth, fn):
    x = y = z = depth  # locals, as a forward's
    if depth <= 1:
        return fn()
    return at_depth(depth - 1, fn) + 0 * (x + y + z)
