"""rirlab.tasks.treebank: NLTK's word_tokenize (the authors' preprocessing of SNLI, MNLI and IMDB) without NLTK.
Each case worked out by hand from NLTK's rules (its Penn Treebank word rules; Punkt's sentence decisions on the
authors' lower-cased text), one rule at a time."""

from __future__ import annotations

import pytest

from rirlab.tasks.treebank import sentences, tokenize

CASES = {
    # opening " -> ``, closing " -> '' (a quote after a space or a bracket opens); clitics split off as before
    "quotes": ('Don\'t stop... It\'s John\'s "best" film, isn\'t it?!',
               ["Do", "n't", "stop", "...", "It", "'s", "John", "'s", "``", "best", "''", "film", ",", "is", "n't",
                "it", "?", "!"]),
    "quotes in brackets": ('She said "fine" (and "ok").',
                           ["She", "said", "``", "fine", "''", "(", "and", "``", "ok", "''", ")", "."]),
    # words the Treebank writes as two
    "split words": ("I cannot, gonna wanna go; gimme, lemme, gotta. 'Tis so.",
                    ["I", "can", "not", ",", "gon", "na", "wan", "na", "go", ";", "gim", "me", ",", "lem", "me", ",",
                     "got", "ta", ".", "'T", "is", "so", "."]),
    # , and : split unless a digit follows
    "numbers": ("It cost 8,000 at 10:30, then a,b.", ["It", "cost", "8,000", "at", "10:30", ",", "then", "a", ",", "b",
                                                      "."]),
    # $ % & # @ * split off; £ is not one of them
    "symbols": ("Pay $5, £5 or 5% & tip #1 @home*",
                ["Pay", "$", "5", ",", "£5", "or", "5", "%", "&", "tip", "#", "1", "@", "home", "*"]),
    # hyphens, slashes, dashes stay on their word
    "kept whole": ("a well-made and/or 7/10 film—great", ["a", "well-made", "and/or", "7/10", "film—great"]),
    # a period inside a sentence stays on its word: abbreviations, a number before a word
    "abbreviations": ("Mr. Smith met Dr. Who in the U.S. on Jan. 5. He left.",
                      ["Mr.", "Smith", "met", "Dr.", "Who", "in", "the", "U.S.", "on", "Jan.", "5.", "He", "left",
                       "."]),
    # e.g. and etc. are not in Punkt's model: they end a sentence; initials before a word do not
    "not abbreviations": ("See e.g. this, by J. R. R. Tolkien. Or etc. that.",
                          ["See", "e.g", ".", "this", ",", "by", "J.", "R.", "R.", "Tolkien", ".", "Or", "etc", ".",
                           "that", "."]),
    # a number before a word goes on; before a closing bracket it ends a sentence
    "numbers and periods": ("I gave it a 7. the end (see 4.) so",
                            ["I", "gave", "it", "a", "7.", "the", "end", "(", "see", "4", ".", ")", "so"]),
    # the closing quote after a sentence's period stays with that sentence
    "closing quote": ('He said "no." Then left.', ["He", "said", "``", "no", ".", "''", "Then", "left", "."]),
    # white space after the last sentence is dropped before the rules that need a space after a clitic
    "trailing space": ('They don\'t "go" \n', ["They", "do", "n't", "``", "go", "''"]),
}


@pytest.mark.parametrize("text, want", CASES.values(), ids=CASES.keys())
def test_tokenize_is_nltk_word_tokenize(text, want):
    assert tokenize(text) == want


def test_sentences_end_where_punkt_ends_them():
    text = 'Mr. Smith left. "Bye," he said. See e.g. this (or 4.) now.'
    assert sentences(text) == ["Mr. Smith left.", '"Bye," he said.', "See e.g.", "this (or 4.)", "now."]
    assert sentences("") == [] and sentences("no end") == ["no end"]
