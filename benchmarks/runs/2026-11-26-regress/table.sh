#!/bin/bash
# One line per run: the figures BENCHMARKS.md quotes, from each run's terminal output.
cd "${OUT:-$(dirname "$0")}"
for f in "$@"; do
  [ -f "$f" ] || continue
  joined=$(grep -m1 '^  joined ' $f | awk '{print $2}')
  errors=$(grep -m1 '^  errors ' $f | awk '{print $2}')
  rate=$(grep -m1 'joins/s achieved' $f | sed -E 's/.*\) ([0-9,]+), peak.*/\1/; s/.*achieved[^0-9]*([0-9,]+).*/\1/')
  perjoin=$(grep -m1 'server CPU during ramp-up' $f | sed -E 's/.*; ([0-9.]+) us per join.*/\1/')
  rcv=$(grep -m1 'CPU per receiver us' $f | sed -E 's/.*server ([0-9.]+),.*/\1/')
  last=$(grep -m1 'time to last receiver' $f | sed -E 's/.*median ([0-9.,]+).*/\1/')
  floor=$(grep -m1 'floor (same fan-out' $f | sed -E 's/.*last receiver median ([0-9.,]+).*/\1/')
  ratio=$(grep -m1 'last receiver / floor' $f | sed -E 's/.*floor +([0-9.]+x) median, ([0-9.]+x) worst.*/\1 (worst \2)/')
  rss=$(grep -m1 'server RSS per connection' $f | sed -E 's/.*connection +//')
  echo "$f: joined $joined errors $errors | joins/s $rate | cpu/join ${perjoin} us | cpu/receiver $rcv us | last rcv median $last ms, floor $floor ms, ratio $ratio | rss/conn $rss"
done
