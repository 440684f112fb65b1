#!/usr/bin/env python3
"""Checks a memd inclusion proof against a signed memd checkpoint, offline.

    python3 ops/verify_proof.py PROOF.json CHECKPOINT.json [--public-key HEX] [--event EVENT.json]

PROOF.json is what `GET /api/v1/events/{id}/proof?tree_size=SEQ` answered;
CHECKPOINT.json a checkpoint of format memd-checkpoint-v2 whose `seq` is
that size (`memd checkpoint --out DIR`, or `GET /api/v1/checkpoints/latest`).
Exit 0 when all three hold, 1 otherwise:

1. the checkpoint is signed (Ed25519) by the trusted key: --public-key,
   else the key the checkpoint names (then make sure it is memd's:
   `memd key public`);
2. it signs a Merkle tree root for the proof's tenant and size;
3. the proof's hashes lead from the event's hash to that root
   (RFC 6962 tree: leaf = SHA-256(0x00 || event hash),
   node = SHA-256(0x01 || left || right); RFC 9162 section 2.1.3.2).

A proof binds the event's *hash*, not the content a daemon shows: it
proves that an event with that hash is in the signed log. To tie the hash
to content, give --event EVENT.json (the event as `GET
/api/v1/events/{id}` answers it, or as the auditor kept it): the script
recomputes the event's hash from its fields and content (memd's canonical
form: a compact JSON head, a newline, the content as PostgreSQL renders
`jsonb`) and checks it is the proof's. Sealed content cannot be checked
this way (the hash covers the sealed text, which the API does not show),
and a fractional number whose text PostgreSQL kept differently than JSON
reads it back may not match: the script says so rather than pass.

Python's standard library only; Ed25519 verification is RFC 8032's
reference arithmetic (slow, and plenty for one signature).
"""
import hashlib
import json
import sys
from datetime import datetime, timezone


# --- Ed25519 verification (RFC 8032, section 5.1.7) -------------------------
P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _add(a, b):
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % P
    bb = (y1 + x1) * (y2 + x2) % P
    cc = 2 * t1 * t2 * D % P
    dd = 2 * z1 * z2 % P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(scalar, point):
    result = (0, 1, 1, 0)
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _same(a, b):
    return (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0


def _decompress(data):
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else (0, y, 1, 0)
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if x & 1 != sign:
        x = P - x
    return (x, y, 1, x * y % P)


G = _decompress(bytes.fromhex("5866666666666666666666666666666666666666666666666666666666666666"))


def ed25519_verify(public_key, message, signature):
    a, r = _decompress(public_key), _decompress(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or len(signature) != 64 or s >= L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % L
    return _same(_mul(s, G), _add(r, _mul(h, a)))


# --- The Merkle tree ---------------------------------------------------------
def leaf_hash(event_hash):
    return hashlib.sha256(b"\x00" + event_hash).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def inclusion_holds(index, size, leaf, path, root):
    """RFC 9162, section 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


# --- An event's hash from its content ----------------------------------------
def pg_jsonb_text(value):
    """`value::jsonb::text`: keys by length then bytes, ", " and ": "."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(pg_string(k) + ": " + pg_jsonb_text(value[k]) for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(pg_jsonb_text(v) for v in value) + "]"
    if isinstance(value, str):
        return pg_string(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return repr(value) if isinstance(value, float) else str(value)


def pg_string(text):
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
             "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in text:
        if ch in short:
            out.append(short[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def micros(rfc3339):
    moment = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    delta = moment - epoch
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def event_hash(tenant, event):
    """memd's chain hash of `event` (core/src/hash_chain.rs)."""
    agent, subject = event.get("agent_id"), event.get("subject_id")
    head = ["memd-event-v3" if subject else "memd-event-v2" if agent else "memd-event-v1",
            tenant, event["seq"], event["event_id"], micros(event["created_at"]),
            micros(event["ts"]), event["session_id"], event["channel"], event["actor_type"],
            event["actor_id"], event["kind"], event["sensitivity"], event["tags"], event["refs"],
            event.get("idempotency_key"), event.get("artifact_id")]
    if subject:
        head += [agent, subject]
    elif agent:
        head.append(agent)
    canonical = (json.dumps(head, ensure_ascii=False, separators=(",", ":")) + "\n"
                 + pg_jsonb_text(event["content"])).encode()
    return hashlib.sha256(bytes.fromhex(event["prev_hash"]) + canonical).hexdigest()


def has_fraction(value):
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(has_fraction(v) for v in value.values())
    if isinstance(value, list):
        return any(has_fraction(v) for v in value)
    return False


def checkpoint_message(c):
    """What memd signs: one line each (format v2)."""
    return "\n".join([c["format"], c["tenant"], str(c["seq"]), c["head_hash"],
                      c["tree_root"], c["signed_at_rfc3339"]]).encode()


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    trusted = None
    if "--public-key" in argv:
        trusted = argv[argv.index("--public-key") + 1]
        args.remove(trusted)
    event = None
    if "--event" in argv:
        event_file = argv[argv.index("--event") + 1]
        args.remove(event_file)
        with open(event_file) as f:
            event = json.load(f)
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(args[0]) as f:
        proof = json.load(f)
    with open(args[1]) as f:
        checkpoint = json.load(f)
    if isinstance(checkpoint, list):
        checkpoint = checkpoint[0]

    def fail(why):
        print("FAILED  " + why)
        return 1

    if checkpoint.get("format") != "memd-checkpoint-v2" or "tree_root" not in checkpoint:
        return fail("not a memd-checkpoint-v2 (it must sign a tree root)")
    key = trusted or checkpoint["public_key"]
    if key.lower() != checkpoint["public_key"].lower():
        return fail("the checkpoint names key %s, not the trusted %s" % (checkpoint["public_key"], key))
    # memd signs the time as RFC 3339 UTC with exactly six fractional digits.
    signed_at = datetime.fromisoformat(checkpoint["signed_at"].replace("Z", "+00:00"))
    checkpoint["signed_at_rfc3339"] = signed_at.astimezone(timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    if not ed25519_verify(bytes.fromhex(key), checkpoint_message(checkpoint),
                          bytes.fromhex(checkpoint["signature"])):
        return fail("the checkpoint's signature does not hold for key " + key)
    if proof["tenant"] != checkpoint["tenant"] or proof["tree_size"] != checkpoint["seq"]:
        return fail("the proof is for %s at tree size %s, the checkpoint for %s at seq %s" % (
            proof["tenant"], proof["tree_size"], checkpoint["tenant"], checkpoint["seq"]))
    if proof["leaf_index"] != proof["seq"] - 1:
        return fail("leaf_index must be seq - 1")
    leaf = leaf_hash(bytes.fromhex(proof["event_hash"]))
    path = [bytes.fromhex(h) for h in proof["path"]]
    if not inclusion_holds(proof["leaf_index"], proof["tree_size"], leaf, path,
                           bytes.fromhex(checkpoint["tree_root"])):
        return fail("the proof's hashes do not lead from event %s to the signed root" % proof["event_id"])
    if event is not None:
        if event.get("event_id") != proof["event_id"]:
            return fail("--event is %s, the proof is for %s" % (event.get("event_id"), proof["event_id"]))
        if event.get("sealed") or event.get("erased"):
            return fail("event %s is sealed at rest: its hash covers the sealed text, not the "
                        "content shown, so it cannot be recomputed here" % proof["event_id"])
        recomputed = event_hash(proof["tenant"], event)
        if recomputed != proof["event_hash"].lower():
            why = " (its content holds fractional numbers: PostgreSQL may keep their text " \
                  "otherwise than JSON reads it back)" if has_fraction(event["content"]) else ""
            return fail("the content of %s hashes to %s, the proof proves %s%s" % (
                proof["event_id"], recomputed, proof["event_hash"], why))
    print("ok      event %s (seq %d) is in %s's log as of the checkpoint at seq %d signed by %s" % (
        proof["event_id"], proof["seq"], proof["tenant"], checkpoint["seq"], key))
    if event is not None:
        print("ok      its content (--event) hashes to the proven hash")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
