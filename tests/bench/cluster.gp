# Admitted rate of one global key over time, per node and in total, against
# the limit and a central GCRA fed the same requests (tests/bench/cluster.py).
#   gnuplot -e "data='cluster-n3.dat'; events='cluster-n3.events'; n=3; out='cluster-n3.png'" \
#           tests/bench/cluster.gp
set terminal pngcairo size 1100,560 font ",11"
set output out
set title sprintf("sluice, %d real nodes, one global key (burst 10, 50/s), skewed demand 5-12x the limit", n)
set xlabel "time (s)"
set ylabel "admitted per second (0.5 s bins)"
set key outside right top
set grid ytics
set yrange [0:*]
# Vertical marks for SIGSTOP/SIGCONT and kill -9/restart, read from the events file.
nev = system(sprintf("wc -l < '%s'", events)) + 0
do for [k=1:nev] {
    t = system(sprintf("sed -n '%dp' '%s' | cut -d' ' -f1", k, events)) + 0
    lbl = system(sprintf("sed -n '%dp' '%s' | cut -d' ' -f2 | tr '_' ' '", k, events))
    set arrow from t, graph 0 to t, graph 1 nohead dt 2 lc rgb "gray40"
    set label lbl at t, graph (0.97 - 0.05 * ((k - 1) % 4)) left offset 0.3, 0 font ",9" tc rgb "gray20"
}
plot data using 1:2 with lines lw 2.5 lc rgb "black" title "cluster total", \
     data using 1:3 with lines lw 1.5 dt 3 lc rgb "red" title "central GCRA (oracle)", \
     data using 1:4 with lines lw 1.5 dt 2 lc rgb "blue" title "limit (50/s)", \
     for [i=1:n] data using 1:(column(4 + i)) with lines lw 1 title sprintf("node%d", i)
