"""``difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()`` in
time linear in the lines (per matching block it finds).

``migrate`` aligns a module's lines before and after its rewrite (which
line of the output is which line of the input; the report's changed lines;
a notebook's source lines). Without junk, ``SequenceMatcher`` looks at
every pair of equal lines: a module where a blank line or ``return x``
occurs ten thousand times costs a hundred million steps, and a 400 KB
module took a minute. The blocks it finds are kept exactly (the longest
common run of lines, the earliest in ``a`` on a tie, then the earliest in
``b``; then the same on each side of it): the longest run is found with a
suffix automaton of ``b``'s part, which ``a``'s part is walked through
once.

Stdlib only.
"""


def _longest_match(a: list, alo: int, ahi: int, b: list, blo: int,
                   bhi: int) -> tuple:
  """``(i, j, k)``: as ``SequenceMatcher.find_longest_match`` (no junk)."""
  # The automaton of b[blo:bhi]: per state, the length of its longest
  # string, its suffix link, its transitions and the end of its first
  # occurrence in b (one for every string of the state: they end at the
  # same places).
  longest, link, moves, first_end = [0], [-1], [{}], [-1]
  last = 0
  for position in range(blo, bhi):
    line = b[position]
    new = len(longest)
    longest.append(longest[last] + 1)
    link.append(0)
    moves.append({})
    first_end.append(position)
    state = last
    while state != -1 and line not in moves[state]:
      moves[state][line] = new
      state = link[state]
    if state != -1:
      target = moves[state][line]
      if longest[state] + 1 == longest[target]:
        link[new] = target
      else:
        clone = len(longest)
        longest.append(longest[state] + 1)
        link.append(link[target])
        moves.append(dict(moves[target]))
        first_end.append(first_end[target])
        while state != -1 and moves[state].get(line) == target:
          moves[state][line] = clone
          state = link[state]
        link[target] = link[new] = clone
    last = new
  best_i, best_j, best_k = alo, blo, 0
  state = size = 0  # the longest run of a ending here that b holds
  for position in range(alo, ahi):
    line = a[position]
    while state and line not in moves[state]:
      state = link[state]
      size = longest[state]
    if line in moves[state]:
      state = moves[state][line]
      size += 1
    else:
      state = size = 0
    if size > best_k:  # strictly: the earliest in a wins a tie
      best_i, best_k = position - size + 1, size
      best_j = first_end[state] - size + 1
  return best_i, best_j, best_k


def matching_blocks(a: list, b: list) -> list:
  """``SequenceMatcher.get_matching_blocks()`` (no junk)."""
  found, pending = [], [(0, len(a), 0, len(b))]
  while pending:
    alo, ahi, blo, bhi = pending.pop()
    i, j, k = _longest_match(a, alo, ahi, b, blo, bhi)
    if k:
      found.append((i, j, k))
      if alo < i and blo < j:
        pending.append((alo, i, blo, j))
      if i + k < ahi and j + k < bhi:
        pending.append((i + k, ahi, j + k, bhi))
  merged = []
  for i, j, k in sorted(found):
    if merged and merged[-1][0] + merged[-1][2] == i and (
        merged[-1][1] + merged[-1][2] == j):
      merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + k)
    else:
      merged.append((i, j, k))
  return merged + [(len(a), len(b), 0)]


def opcodes(a: list, b: list) -> list:
  """``SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()``."""
  i = j = 0
  out = []
  for block_i, block_j, size in matching_blocks(a, b):
    if i < block_i and j < block_j:
      out.append(('replace', i, block_i, j, block_j))
    elif i < block_i:
      out.append(('delete', i, block_i, j, block_j))
    elif j < block_j:
      out.append(('insert', i, block_i, j, block_j))
    i, j = block_i + size, block_j + size
    if size:
      out.append(('equal', block_i, i, block_j, j))
  return out
