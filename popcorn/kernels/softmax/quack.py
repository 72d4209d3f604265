"""softmax over the last dimension on quack's CuTe DSL kernel (it takes (rows, vocab))."""

from popcorn.core.devices import dense
from popcorn.core.imports import imported


def softmax(x):
    return imported("quack.softmax:softmax")(dense(x).view(-1, x.shape[-1])).view(x.shape)
