#!/usr/bin/env bash
# scripts/make-quickstart-data writes the same files on every run and every awk: two runs into
# DIR/a and DIR/b are byte for byte the same, and equal to the files its generator gives (their
# SHA-256 below, computed once by an independent reimplementation of the script's shuffles); the
# held-back numbers are absent from the corpus.
#   check_quickstart_data.sh SCRIPT DIR
set -euo pipefail
script=${1:?usage: check_quickstart_data.sh SCRIPT DIR} dir=${2:?usage: check_quickstart_data.sh SCRIPT DIR}
rm -rf "$dir"
"$script" "$dir/a" > /dev/null
"$script" "$dir/b" > /dev/null
for f in corpus.txt held-back.tsv; do
  cmp "$dir/a/$f" "$dir/b/$f" || { echo "two runs wrote different $f"; exit 1; }
done
expect() {  # FILE SHA256
  local got; got=$(sha256sum "$dir/a/$1" | cut -d' ' -f1)
  [[ $got == "$2" ]] || { echo "$1: sha256 $got, expected $2"; exit 1; }
}
expect corpus.txt 8ac68ef1c0653c50167dfd09a0ed4572b3dae2fc08aded01f35bec818b5e3724
expect held-back.tsv 145fff2bab458be57b3de086d517a08e59f32d791b17f4a266b17dfb2bcd76b4
[[ $(wc -l < "$dir/a/held-back.tsv") == 100 && $(wc -l < "$dir/a/corpus.txt") == 54000 ]] ||
  { echo "expected 100 held-back numbers and 54000 sentences"; exit 1; }
if grep -qFf <(cut -f1 "$dir/a/held-back.tsv" | sed 's/$/ is /') "$dir/a/corpus.txt"; then
  echo "a held-back number is in the corpus"; exit 1
fi
echo "make-quickstart-data: the same files twice, as expected"
