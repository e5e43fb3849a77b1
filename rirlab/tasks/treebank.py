"""Word tokens as NLTK's ``word_tokenize`` gives them, without NLTK or its downloaded Punkt model.

The authors' preprocessing (process_SNLI.py, preprocess_MNLIdev.py, process_IMDB.py of JRC1995/BeamRecursionFamily,
the code behind the published numbers) lower-cases a text and calls ``nltk.word_tokenize``: Punkt's English model
cuts it into sentences, then NLTK's Penn Treebank rules (NLTKWordTokenizer, NLTK 3.6.6 and later) split each
sentence into words. The word rules are reproduced in their order (:func:`words`): an opening ``"`` -> ````` `` `````,
a closing one -> ``''``; clitics ``n't 's 're 've 'll 'd 'm`` split off; ``cannot gonna gotta wanna gimme lemme
'tis`` split in two; ``,`` and ``:`` split off unless a digit follows (``8,000``, ``10:30`` stay whole); ``; @ #
$ % & * ? !``, brackets, ``--`` and ``...`` their own tokens; a period split off only at a sentence's end; every
other character (``- / + = £ € —``, a period inside a word) stays on its word.

Punkt's model cannot be downloaded at run time (and NLTK is not a dependency), so :func:`sentences` follows
Punkt's algorithm with what the model would decide on lower-cased text written out as rules: a period ends a
sentence unless the word before it is an abbreviation (:data:`ABBREVIATIONS`: the model's common ones; ``e.g.``,
``i.e.`` and ``etc.`` are not among them, so they do end one), or an initial or a number before a word or a mark
(``j. smith``, ``7. the``: the orthographic heuristic; in lower-cased text the next word is never capitalised).
What remains is what only the model knows: its rarer abbreviations (US states, ranks, ``s.a.``), its collocations,
and its capitalisation statistics (after an initial or a number, a word it saw begin sentences in lower case may
start one); a period there may be split off here and not by NLTK, or the other way. On real English text (3,598
paragraphs of papers and package descriptions, lower-cased) the tokens equal those of NLTK's code run with the
model's abbreviations and without its statistics on every paragraph. The rules run on the text as given, case
kept; the authors lower-case first, which changes only clitics of mixed case (``Don'T``).
"""

from __future__ import annotations

import bisect
import re

# --- sentences (module docstring) ---

# abbreviations of Punkt's English model met in ordinary prose (a selection): a period after one ends no sentence
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr messrs bros gen col lt maj adm rep reps sen "  # titles
    "inc corp co cos ltd "  # companies
    "jan feb aug sep sept oct nov dec wed fri tues "  # dates
    "vs ok ave ft yr a.m p.m a.d ph.d u.s u.s.a u.k u.n u.s.s.r l.a n.y d.c "
    "c d e f g h k l m n p r s t v w".split())  # the initials it lists

_NON_WORD = r"[)\";}\]*:@'({\[!?]"  # Punkt: characters that end a word
_MULTI = r"(?:-{2,}|\.{2,}|(?:\.\s){2,}\.)"  # Punkt: runs of dashes or dots, one token
_WORD = re.compile(rf"{_MULTI}|(?=[^(\"`{{\[:;&#*@)}}\]\-,])\S+?(?=\s|$|{_NON_WORD}|{_MULTI}|,(?=$|\s|{_NON_WORD}|"
                   rf"{_MULTI}))|\S")  # Punkt's words: what its decisions look at
_END = re.compile(rf"[.?!](?=({_NON_WORD})|\s+(\S+))")  # where a sentence may end: before a mark or a token
_SPACE, _RUN = re.compile(r"\s"), re.compile(r"\S+")
_CLOSING = re.compile(r"[\"')\]}]+?(?:\s+|(?=--)|$)")  # closing marks that stay with the sentence they end
_NUMBER = re.compile(r"-?[.,]?\d[\d,.-]*\.?")
_INITIAL = re.compile(r"[^\W\d]\.")


def _ends(word: str, nxt: str) -> bool:
    """Whether Punkt's model ends a sentence after its word ``word``, ``nxt`` the next, in lower-cased text."""
    if word in (".", "?", "!"):
        return True
    stem = word[:-1].lower()
    if not word.endswith(".") or stem.endswith(".") or stem in ABBREVIATIONS or stem.split("-")[-1] in ABBREVIATIONS:
        return False  # no period, an ellipsis, an abbreviation
    if _INITIAL.fullmatch(word) or _NUMBER.fullmatch(word):  # "j. smith", "7. the": no end before a word or a mark
        return not (nxt in (";", ":", ",", ".", "!", "?") or nxt[0].lower().islower())
    return True


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` where ``word_tokenize``'s Punkt model cuts it (module docstring): at a candidate
    (``_END``) when Punkt's words of its run of non-space characters and the next token hold a sentence end (of
    candidates in one run only the last counts); closing marks after it stay with the sentence they close."""
    found, spans, start = list(_END.finditer(text)), [], 0
    runs = [r.start() for r in _RUN.finditer(text)]
    for m, later in zip(found, found[1:] + [None]):
        run = runs[bisect.bisect_right(runs, m.start()) - 1]
        if later and run < m.start() and not _SPACE.search(text, m.end(), later.start()):
            continue  # a later candidate in the same run decides (one that opens its run counts too)
        words = _WORD.findall(text[run:m.end()] + (m[1] or text[m.end():m.end(2)]))
        if any(_ends(w, nxt) for w, nxt in zip(words, words[1:])):
            spans.append((start, m.end()))
            start = m.start(2) if m[2] else m.end()
    spans.append((start, len(text.rstrip())))
    out, shift = [], 0
    for (a, b), nxt in zip(spans, spans[1:] + [None]):
        close = nxt and _CLOSING.match(text, nxt[0], nxt[1])  # `said." Then`: the quote ends the first sentence
        if close:
            out.append(text[a + shift:nxt[0] + len(close[0].rstrip())])
        elif text[a + shift:b]:
            out.append(text[a + shift:b])
        shift = close.end() - nxt[0] if close else 0
    return out


# --- words: the Penn Treebank rules of word_tokenize, in their order ---

_CLOSERS = r"[\]\)}>\"'»”’ ]"
_RULES = [(re.compile(p), r) for p, r in (
    # opening quotes: `` after a start, a space or an opening bracket; typographic ones their own tokens
    (r"([«“‘„]|`+)", r" \1 "), (r'^"', "``"), (r"(``)", r" \1 "), (r"([ (\[{<])(\"|'')", r"\1 `` "),
    (r"(?i)(')(?!re|ve|ll|m|t|s|d|n)(\w)\b", r"\1 \2"),
    # punctuation: the final period (closers after it), commas and colons not before a digit, ...
    (rf"([^.])(\.)({_CLOSERS}*)\s*$", r"\1 \2 \3 "), (r"([:,])([^\d])", r" \1 \2"), (r"([:,])$", r" \1 "),
    (r"\.{2,}", r" \g<0> "), (r"[;@#$%&]", r" \g<0> "), (r"([^.])(\.)([\]\)}>\"']*)\s*$", r"\1 \2\3 "),
    (r"[?!]", r" \g<0> "), (r"([^'])' ", r"\1 ' "), (r"[*]", r" \g<0> "),
    (r"[\]\[(){}<>]", r" \g<0> "), (r"--", r" -- "),
    (r"\A|\Z", " "),
    # closing quotes -> '', then the clitics before a space
    (r"([»”’])", r" \1 "), (r"''", " '' "), (r'"', " '' "),
    (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 "), (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 "),
    # words written as one that the Treebank splits in two
    *((rf"(?i)\b({a})({b})\b", r" \1 \2 ") for a, b in (("can", "not"), ("d", "'ye"), ("gim", "me"), ("gon", "na"),
                                                         ("got", "ta"), ("lem", "me"), ("more", "'n"))),
    (r"(?i)\b(wan)(na)(?=\s)", r" \1 \2 "), (r"(?i) ('t)(is)\b", r" \1 \2 "), (r"(?i) ('t)(was)\b", r" \1 \2 "))]


def words(sentence: str) -> list[str]:
    """The word tokens of one sentence (the Treebank rules of ``word_tokenize``)."""
    for pattern, repl in _RULES:
        sentence = pattern.sub(repl, sentence)
    return sentence.split()


def tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)`` without NLTK (module docstring), case kept: ``Don't say "8,000 cannot".`` ->
    Do n't say `` 8,000 can not '' ."""
    return [w for s in sentences(text) for w in words(s)]
