# Program behaviour the eval-frame hook must not change: generators (send, throw, yield from),
# asyncio, exceptions and tracebacks, properties, dunder overrides, super(), closures and
# recursion. Prints one line per check; the e2e test compares the output traced and untraced.
# With an argument "depth", prints only the deepest recursion that works.
import asyncio
import sys
import traceback


def counter():
    total = 0
    while True:
        got = yield total
        if got is None:
            return total
        total += got


def delegate():
    result = yield from counter()
    yield ("done", result)


def generators():
    g = delegate()
    next(g)
    out = [g.send(i) for i in (1, 2, 3)]
    out.append(g.send(None))
    t = counter()
    next(t)
    try:
        t.throw(ValueError("thrown"))
    except ValueError as e:
        out.append(str(e))
    return out


async def leaf(i):
    await asyncio.sleep(0)
    return i * i


async def gather():
    return await asyncio.gather(*(leaf(i) for i in range(5)))


def raiser(n):
    if n == 0:
        raise KeyError("deep")
    return raiser(n - 1)


def exceptions():
    try:
        raiser(5)
    except KeyError:
        frames = traceback.extract_tb(sys.exc_info()[2])
        return [f.name for f in frames]


class Base:
    def __init__(self):
        self._x = 2

    @property
    def x(self):
        return self._x * 10

    def __getitem__(self, k):
        return k * 2


class Child(Base):
    def __getattribute__(self, name):
        if name == "magic":
            return 42
        return super().__getattribute__(name)

    def __getitem__(self, k):
        return super().__getitem__(k) + 1


def closures():
    def make(n):
        return lambda x: x + n
    return [make(i)(10) for i in range(3)]


def recurse(n):
    return 0 if n == 0 else 1 + recurse(n - 1)


def deepest():
    lo, hi = 0, 100000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            recurse(mid)
            lo = mid
        except RecursionError:
            hi = mid - 1
    return lo


if len(sys.argv) > 1 and sys.argv[1] == "depth":
    print(deepest())
else:
    print("generators", generators())
    print("asyncio", asyncio.run(gather()))
    print("exceptions", exceptions())
    c = Child()
    print("objects", c.x, c[3], c.magic, Base()[4])
    print("closures", closures())
    print("recursion", recurse(500))
