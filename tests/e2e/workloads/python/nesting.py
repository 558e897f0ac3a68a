# Known Python call nesting and counts for the python layer's end-to-end test (the test names
# the expected counts; keep the two in step).


def h(x):
    return x + 1


def g(x):
    return h(x) + h(x)


def f():
    total = 0
    for i in range(3):
        total += g(i)
    return total


class Model:
    def forward(self, x):
        return g(x)


def loop(n):
    for i in range(n):
        h(i)


def gen(n):
    for i in range(n):
        yield h(i)


def consume():
    total = 0
    for v in gen(3):
        total += v
    return total


def main():
    f()
    Model().forward(1)
    loop(50)
    consume()


main()
