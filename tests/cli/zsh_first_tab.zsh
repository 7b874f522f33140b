# An interactive zsh on a pseudo-terminal, with completions/pglock.zsh on $fpath as _pglock
# (as docs/operators.md installs it): type `pglock sta` and one TAB, print what the line
# became. Arguments: the folder holding _pglock.
zmodload zsh/zpty
zpty shell zsh -f -i
zpty -w shell "PS1='> '; fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w -n shell $'pglock sta\t'
seen=""
# Until the line was completed, or the shell rang its bell (nothing to complete).
while (( SECONDS < 60 )); do
  zpty -r -t shell chunk && seen+=$chunk
  [[ $seen == *'pglock status '* || $seen == *$'pglock sta\a'* ]] && break
  sleep 0.05
done
zpty -d shell
[[ $seen == *'pglock status '* ]] && print completed || print nothing
