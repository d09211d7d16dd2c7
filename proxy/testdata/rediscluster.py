"""redis-py RedisCluster workload for proxy's facade tests
(TestFacadeRedisPyShards, TestFacadeRedisPyCluster).

Usage: python3 rediscluster.py HOST PORT
Connects a RedisCluster seeded with HOST:PORT, runs a fixed workload of
SET/GET, MSET/MGET by hash tag, a cross-slot MGET and a pipeline over many
slots, and prints one JSON object: "results" (every reply, or the
exception's type and message) and "nodes" (the host:port of every node the
client learned, sorted).
"""
import json
import sys

from redis.cluster import RedisCluster


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    rc = RedisCluster(host=host, port=port, decode_responses=True)
    out = []

    def rec(name, f, *args):
        try:
            out.append([name, list(args), f(*args)])
        except Exception as e:  # the error a client sees is a result too
            out.append([name, list(args), "%s: %s" % (type(e).__name__, e)])

    for i in range(100):
        rec("set", rc.set, "py:%d" % i, "v%d" % i)
    for i in range(100):
        rec("get", rc.get, "py:%d" % i)
    for i in range(10):
        tag = "{pyuser%d}" % i
        rec("mset", rc.mset, {tag + "a": "1", tag + "b": "2"})
        rec("mget", rc.mget, tag + "a", tag + "b", tag + "missing")
        rec("delete", rc.delete, tag + "a")
    rec("mget cross-slot", rc.mget, "py:1", "py:2")
    rec("mget_nonatomic", rc.mget_nonatomic, "py:1", "py:2", "py:3")
    pipe = rc.pipeline()
    for i in range(60):
        pipe.incr("pyctr:%d" % (i % 17))
        pipe.get("py:%d" % ((i * 7) % 100))
    rec("pipeline", pipe.execute)
    nodes = sorted("%s:%s" % (n.host, n.port) for n in rc.get_nodes())
    rc.close()
    print(json.dumps({"results": out, "nodes": nodes}))


if __name__ == "__main__":
    main()
