import random, subprocess
random.seed(7)
rows = subprocess.run(["psql","-h","127.0.0.1","-U","postgres","-d","memd_acb100k","-Atc",
  "select seq, part from projections.chunks where tenant_id='acb-bench' order by random() limit 150"],
  capture_output=True, text=True).stdout.split()
seqs=[r.split('|')[0] for r in rows]; parts=[r.split('|')[1] for r in rows]
lex = ["'deploy'","'databas'","'config'","'error'"]
arr = "ARRAY['deploy','databas','config','error']"
base_where = "c.tenant_id = 'acb-bench' AND (c.channel = ANY ('{private,team,public}') AND c.sensitivity = ANY ('{none,low,high}')) AND NOT (c.kind = ANY ('{}'::text[]))"
cols = "c.chunk_id, c.event_id, c.seq, c.ts, c.kind, c.source, c.token_est, c.importance, c.content_hash, c.word_hashes, c.part"
matched = f"(SELECT coalesce(sum(1 << (l.o - 1)::int), 0)::int FROM unnest({arr}::tsquery[]) WITH ORDINALITY AS l (q, o) WHERE c.tsv @@ l.q)"
u = f"unnest('{{{','.join(seqs)}}}'::bigint[], '{{{','.join(parts)}}}'::int[]) AS u (seq, part)"
lat = "CROSS JOIN LATERAL (SELECT * FROM projections.chunks c WHERE c.tenant_id = 'acb-bench' AND c.seq = u.seq AND c.part = u.part LIMIT 1) AS c"
inline = " | ".join(f"(CASE WHEN c.tsv @@ {l}::tsquery THEN {1<<i} ELSE 0 END)" for i,l in enumerate(lex))
v = {
 "v1_current": f"SELECT {cols}, length(c.tsv), {matched} AS matched FROM {u} {lat} WHERE {base_where};",
 "v2_nomatched": f"SELECT {cols}, length(c.tsv), 0 FROM {u} {lat} WHERE {base_where};",
 "v3_narrow": f"SELECT c.seq FROM {u} {lat} WHERE {base_where};",
 "v4_inline_matched": f"SELECT {cols}, length(c.tsv), {inline} AS matched FROM {u} {lat} WHERE {base_where};",
 "v5_seqonly_index": f"SELECT u.seq FROM {u} CROSS JOIN LATERAL (SELECT c.seq FROM projections.chunks c WHERE c.tenant_id = 'acb-bench' AND c.seq = u.seq LIMIT 1) c;",
 "v6_nowords": f"SELECT c.chunk_id, c.event_id, c.seq, c.ts, c.kind, c.source, c.token_est, c.importance, c.content_hash, c.part FROM {u} {lat} WHERE {base_where};",
}
for k,s in v.items(): open(k+".sql","w").write(s+"\n")
arrp = "ARRAY[:l1,:l2,:l3,:l4]"
matchedp = f"(SELECT coalesce(sum(1 << (l.o - 1)::int), 0)::int FROM unnest({arrp}::tsquery[]) WITH ORDINALITY AS l (q, o) WHERE c.tsv @@ l.q)"
inlinep = " | ".join(f"(CASE WHEN c.tsv @@ :l{i+1}::tsquery THEN {1<<i} ELSE 0 END)" for i in range(4))
open("p1_current.sql","w").write(f"SELECT {cols}, length(c.tsv), {matchedp} AS matched FROM {u} {lat} WHERE {base_where};\n")
open("p4_inline.sql","w").write(f"SELECT {cols}, length(c.tsv), {inlinep} AS matched FROM {u} {lat} WHERE {base_where};\n")
