"""The text-task specs (RIR Tables 4, 6, 7 and EBT Tables 3-4, read from the user's files) and the reference table
each is printed beside: shared by tests/analysis/test_data_nlp_specs.py and test_analysis_pairing.py."""

from __future__ import annotations

from tests.helpers.cli import REPO

# reference table -> the specs whose rows it is printed beside
TABLE_SPECS = {
    "rir_nlp:table4_lra_listops": ["rir_table4_lra_listops"], "rir_nlp:table4_lra_text": ["rir_table4_lra_text"],
    "rir_nlp:table4_lra_retrieval": ["rir_table4_lra_retrieval"],
    "rir_nlp:table6_sst5": ["rir_table6_sst5"], "rir_nlp:table6_imdb": ["rir_table6_imdb"],
    "rir_nlp:table7_snli": ["rir_table7_snli"], "rir_nlp:table7_qqp": ["rir_table7_qqp"],
    "rir_nlp:table7_mnli": ["rir_table7_mnli"],
    "ebt_nlp:table3_snli": ["ebt_table3_snli", "ebt_table3_gau_snli"],
    "ebt_nlp:table3_qqp": ["ebt_table3_qqp", "ebt_table3_gau_qqp"],
    "ebt_nlp:table3_mnli": ["ebt_table3_mnli", "ebt_table3_gau_mnli"],
    "ebt_nlp:table4_logic": ["ebt_table4_logic"], "ebt_nlp:table4_sst5": ["ebt_table4_sst5"],
    "ebt_nlp:table4_imdb": ["ebt_table4_imdb"],
}
SPECS = sorted({s for names in TABLE_SPECS.values() for s in names})


def spec_path(name: str):
    return REPO / "search_spaces" / f"{name}.yaml"
