"""Agent turns against one daemon: how often a bundle's cached state and
recent window were kept (provenance.cache, provenance.recent_window).
usage: turns.py URL TOKEN OUT"""
import json, sys, threading, urllib.request, collections

url, token, out = sys.argv[1], sys.argv[2], sys.argv[3]

def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())

def event(session, text):
    return {"session_id": session, "channel": "private",
            "actor": {"type": "human", "id": "u"}, "kind": "message",
            "content": {"text": text}}

words = ["export", "account", "nightly", "job", "timeout", "retry", "page", "size"]
post("/api/v1/events", {"events": [event("hist", f"the nightly export of account {i} hit a {words[i % 8]} after {i % 7} retries") for i in range(300)]})

stats = collections.Counter()
lock = threading.Lock()
def agent(n):
    for t in range(60):
        post("/api/v1/events", event(f"turn-{n}", f"agent {n} turn {t}: export of account {t % 31} {words[t % 8]}"))
        acb = post("/api/v1/acb/build", {"session_id": f"turn-{n}", "query_text": f"why did the export of account {t % 31} fail?"})
        p = acb["provenance"]
        with lock:
            stats["bundles"] += 1
            stats["cache " + p["cache"]] += 1
            stats["window events"] += p["recent_window"]["events"]
            stats["window events read"] += p["recent_window"]["read"]
threads = [threading.Thread(target=agent, args=(n,)) for n in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
with open(out, "w") as f:
    json.dump(dict(stats), f, indent=1)
print(dict(stats))
