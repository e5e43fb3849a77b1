"""Target statistics of the original data, and the comparison behind `rirlab data stats --split S --compare`.

Every compared statistic is a mean over rows of a per-row value (a share is the mean of a 0/1 value), so
its sampling error is known: a split of ``n`` rows passes a statistic when

    |ours - target| <= 4 * sd * sqrt(1/n + 1/n_target) + FLOOR

with ``sd`` the per-row standard deviation in the target sample and ``n_target`` that sample's size
(4 standard errors of the difference; FLOOR absorbs rounding). Length quantiles are compared as shares:
the target's quantile value ``v`` is stored and the statistic is the share of rows of length <= v.

How the targets were derived (``python -m rirlab.tasks.targets listops|logic`` prints them again):

- ListOps: each split's original generator, with the parameters of the public scripts (see
  :mod:`rirlab.tasks.listops`): the ListOps generator (Nangia & Bowman, 2018; max_args 5, max_depth
  20), the argument splits of *Beam Tree Recursive Cells* (ICML 2023; max_args 10/15, max_depth 9,
  100-1000 tokens), the LRA generator (Tay et al., 2021; max_args 10, max_depth 10, 500 < length
  < 2000), the length splits of Havrylov et al. (2019; ListOps generator, rejection on length, the window's
  ends excluded as in latent-treelstm ``make_data.py``: MIN < length < MAX). For those four the shares of rows
  at or below the window's lower end (0) and within its top (1) are compared too.
  dev/test: random rows of a de-duplicated set of 90,000 draws (n_target: the 90,000 rows of one
  such set); the length and argument splits: 10,000 draws of the generator conditioned on length,
  sampled by ``listops.SizeModel``, which ``tests/test_data_listops.py`` checks against plain
  rejection from the generator. Seed 2024, independent of the splits' data_seed.
- Logic: the distributed files of Bowman, Manning & Potts (2015): train0..train6 pooled for
  train/dev, ``testN`` for ``ops_N``.
"""

from __future__ import annotations

import sys
from typing import Callable

import numpy as np

FLOOR = 0.002


# --- per-row values ---

def listops_values(rows, max_args: int, length_cuts: dict, depth_cut: int) -> dict[str, np.ndarray]:
    """Per-row values of every compared ListOps statistic (rows: (text, label))."""
    from rirlab.tasks import listops

    out: dict[str, list] = {}

    def put(name, value):
        out.setdefault(name, []).append(float(value))

    for text, label in rows:
        toks = listops.tokenize(text)
        depth, counts = listops.shape(toks)
        for q, v in length_cuts.items():
            put(f"length <= {v} ({q})", len(toks) <= v)
        put("depth (mean)", depth)
        put(f"depth >= {depth_cut}", depth >= depth_cut)
        n_ops = max(1, len(counts))
        put("args per operator (mean)", sum(counts) / n_ops if counts else 0)
        put(f"operators with {max_args} args", sum(c == max_args for c in counts) / n_ops)
        leaf = _leaf_counts(toks)
        put(f"leaf operators with {max_args} args", sum(c == max_args for c in leaf) / max(1, len(leaf)))
        for y in range(10):
            put(f"label {y}", label == y)
    return {k: np.asarray(v) for k, v in out.items()}


def _leaf_counts(toks: list[str]) -> list[int]:
    """Argument counts of the operators whose arguments are all digits."""
    from rirlab.tasks import listops

    out, stack = [], []  # stack: [args so far, all digits so far]
    for tok in toks:
        if tok in listops.OPS:
            if stack:
                stack[-1][0] += 1
                stack[-1][1] = False
            stack.append([0, True])
        elif tok == listops.END:
            n, leaf = stack.pop()
            if leaf:
                out.append(n)
        elif stack:
            stack[-1][0] += 1
    return out


def logic_values(rows, ns: tuple, depth_cut: int) -> dict[str, np.ndarray]:
    """Per-row values of every compared logic statistic (rows: (relation, premise, hypothesis))."""
    from rirlab.tasks import logic

    out: dict[str, list] = {}

    def put(name, value):
        out.setdefault(name, []).append(float(value))

    for rel, p, h in rows:
        a, b = logic.n_ops(p), logic.n_ops(h)
        depth = max(logic.depth(logic.parse(p)), logic.depth(logic.parse(h)))
        for n in ns:
            put(f"operators N = {n}", max(a, b) == n)
        put("operators of the other formula (mean)", min(a, b))
        put("other formula has 0 operators", min(a, b) == 0)
        put("depth (mean)", depth)
        put(f"depth >= {depth_cut}", depth >= depth_cut)
        words = (p + " " + h).split()
        ops = sum(t in ("not", "and", "or") for t in words)
        put("'not' among operators", words.count("not") / max(1, ops))
        for r in logic.RELATIONS:
            put(f"relation {r}", rel == r)
    return {k: np.asarray(v) for k, v in out.items()}


# --- targets: split -> {"n": n_target, "args": values() keyword arguments, "stats": {name: (mean, sd)}} ---

TARGETS: dict[str, dict[str, dict]] = {'listops': {'dev': {'n': 90000,
                     'args': {'max_args': 5,
                              'length_cuts': {'short': 5, 'q10': 6, 'q25': 8, 'q50': 15, 'q75': 40, 'q90': 106},
                              'depth_cut': 11},
                     'stats': {'length <= 5 (short)': (0.0468, 0.2111),
                               'length <= 6 (q10)': (0.1386, 0.3455),
                               'length <= 8 (q25)': (0.2598, 0.4385),
                               'length <= 15 (q50)': (0.5007, 0.5),
                               'length <= 40 (q75)': (0.7547, 0.4303),
                               'length <= 106 (q90)': (0.9004, 0.2994),
                               'depth (mean)': (4.5346, 4.371),
                               'depth >= 11': (0.1036, 0.3048),
                               'args per operator (mean)': (3.5879, 0.6611),
                               'operators with 5 args': (0.258, 0.289),
                               'leaf operators with 5 args': (0.198, 0.342),
                               'label 0': (0.1132, 0.3168),
                               'label 1': (0.0999, 0.2999),
                               'label 2': (0.0972, 0.2962),
                               'label 3': (0.0979, 0.2971),
                               'label 4': (0.0998, 0.2997),
                               'label 5': (0.0983, 0.2977),
                               'label 6': (0.0954, 0.2937),
                               'label 7': (0.0926, 0.2899),
                               'label 8': (0.0962, 0.2949),
                               'label 9': (0.1096, 0.3124)}},
             'test': {'n': 90000,
                      'args': {'max_args': 5,
                               'length_cuts': {'short': 5, 'q10': 6, 'q25': 8, 'q50': 15, 'q75': 40, 'q90': 106},
                               'depth_cut': 11},
                      'stats': {'length <= 5 (short)': (0.0468, 0.2111),
                                'length <= 6 (q10)': (0.1386, 0.3455),
                                'length <= 8 (q25)': (0.2598, 0.4385),
                                'length <= 15 (q50)': (0.5007, 0.5),
                                'length <= 40 (q75)': (0.7547, 0.4303),
                                'length <= 106 (q90)': (0.9005, 0.2994),
                                'depth (mean)': (4.5339, 4.3699),
                                'depth >= 11': (0.1036, 0.3047),
                                'args per operator (mean)': (3.5879, 0.6611),
                                'operators with 5 args': (0.258, 0.289),
                                'leaf operators with 5 args': (0.198, 0.342),
                                'label 0': (0.1131, 0.3168),
                                'label 1': (0.0999, 0.2999),
                                'label 2': (0.0972, 0.2962),
                                'label 3': (0.0979, 0.2971),
                                'label 4': (0.0998, 0.2997),
                                'label 5': (0.0983, 0.2978),
                                'label 6': (0.0954, 0.2937),
                                'label 7': (0.0926, 0.2899),
                                'label 8': (0.0962, 0.2948),
                                'label 9': (0.1096, 0.3124)}},
             'len_200_300': {'n': 10000,
                             'args': {'max_args': 5,
                                      'length_cuts': {'below the window': 200,
                                                      'q10': 208,
                                                      'q25': 219,
                                                      'q50': 241,
                                                      'q75': 267,
                                                      'q90': 286,
                                                      'window top': 299},
                                      'depth_cut': 19},
                             'stats': {'length <= 200 (below the window)': (0.0, 0.0),
                                       'length <= 208 (q10)': (0.1134, 0.3171),
                                       'length <= 219 (q25)': (0.2584, 0.4378),
                                       'length <= 241 (q50)': (0.5097, 0.4999),
                                       'length <= 267 (q75)': (0.7567, 0.4291),
                                       'length <= 286 (q90)': (0.9069, 0.2906),
                                       'length <= 299 (window top)': (1.0, 0.0),
                                       'depth (mean)': (16.7876, 2.5467),
                                       'depth >= 19': (0.4437, 0.4968),
                                       'args per operator (mean)': (3.5648, 0.1446),
                                       'operators with 5 args': (0.2691, 0.0585),
                                       'leaf operators with 5 args': (0.163, 0.0891),
                                       'label 0': (0.1171, 0.3215),
                                       'label 1': (0.0967, 0.2955),
                                       'label 2': (0.0999, 0.2999),
                                       'label 3': (0.091, 0.2876),
                                       'label 4': (0.0969, 0.2958),
                                       'label 5': (0.0976, 0.2968),
                                       'label 6': (0.0929, 0.2903),
                                       'label 7': (0.0909, 0.2875),
                                       'label 8': (0.0992, 0.2989),
                                       'label 9': (0.1178, 0.3224)}},
             'len_500_600': {'n': 10000,
                             'args': {'max_args': 5,
                                      'length_cuts': {'below the window': 500,
                                                      'q10': 507,
                                                      'q25': 519,
                                                      'q50': 540,
                                                      'q75': 566,
                                                      'q90': 586,
                                                      'window top': 599},
                                      'depth_cut': 19},
                             'stats': {'length <= 500 (below the window)': (0.0, 0.0),
                                       'length <= 507 (q10)': (0.1009, 0.3012),
                                       'length <= 519 (q25)': (0.2615, 0.4395),
                                       'length <= 540 (q50)': (0.5083, 0.4999),
                                       'length <= 566 (q75)': (0.7552, 0.43),
                                       'length <= 586 (q90)': (0.9052, 0.2929),
                                       'length <= 599 (window top)': (1.0, 0.0),
                                       'depth (mean)': (18.8529, 0.5954),
                                       'depth >= 19': (0.9235, 0.2658),
                                       'args per operator (mean)': (3.5778, 0.0978),
                                       'operators with 5 args': (0.2742, 0.04),
                                       'leaf operators with 5 args': (0.1701, 0.0595),
                                       'label 0': (0.1235, 0.329),
                                       'label 1': (0.0976, 0.2968),
                                       'label 2': (0.0968, 0.2957),
                                       'label 3': (0.0928, 0.2902),
                                       'label 4': (0.1004, 0.3005),
                                       'label 5': (0.0937, 0.2914),
                                       'label 6': (0.0908, 0.2873),
                                       'label 7': (0.087, 0.2818),
                                       'label 8': (0.0983, 0.2977),
                                       'label 9': (0.1191, 0.3239)}},
             'len_900_1000': {'n': 10000,
                              'args': {'max_args': 5,
                                       'length_cuts': {'below the window': 900,
                                                       'q10': 908,
                                                       'q25': 919,
                                                       'q50': 940,
                                                       'q75': 966,
                                                       'q90': 985,
                                                       'window top': 999},
                                       'depth_cut': 19},
                              'stats': {'length <= 900 (below the window)': (0.0, 0.0),
                                        'length <= 908 (q10)': (0.1088, 0.3114),
                                        'length <= 919 (q25)': (0.257, 0.437),
                                        'length <= 940 (q50)': (0.503, 0.5),
                                        'length <= 966 (q75)': (0.7506, 0.4327),
                                        'length <= 985 (q90)': (0.9051, 0.2931),
                                        'length <= 999 (window top)': (1.0, 0.0),
                                        'depth (mean)': (18.9942, 0.1057),
                                        'depth >= 19': (0.996, 0.0631),
                                        'args per operator (mean)': (3.5834, 0.0731),
                                        'operators with 5 args': (0.2759, 0.03),
                                        'leaf operators with 5 args': (0.1726, 0.0449),
                                        'label 0': (0.1223, 0.3276),
                                        'label 1': (0.101, 0.3013),
                                        'label 2': (0.0942, 0.2921),
                                        'label 3': (0.0929, 0.2903),
                                        'label 4': (0.0949, 0.2931),
                                        'label 5': (0.0912, 0.2879),
                                        'label 6': (0.0917, 0.2886),
                                        'label 7': (0.0914, 0.2882),
                                        'label 8': (0.1012, 0.3016),
                                        'label 9': (0.1192, 0.324)}},
             'args_10': {'n': 10000,
                         'args': {'max_args': 10,
                                  'length_cuts': {'q10': 158, 'q25': 245, 'q50': 415, 'q75': 635, 'q90': 821},
                                  'depth_cut': 8},
                         'stats': {'length <= 158 (q10)': (0.1, 0.3),
                                   'length <= 245 (q25)': (0.2517, 0.434),
                                   'length <= 415 (q50)': (0.5007, 0.5),
                                   'length <= 635 (q75)': (0.751, 0.4324),
                                   'length <= 821 (q90)': (0.9004, 0.2995),
                                   'depth (mean)': (7.9943, 0.0993),
                                   'depth >= 8': (0.9962, 0.0615),
                                   'args per operator (mean)': (5.9682, 0.3694),
                                   'operators with 10 args': (0.1078, 0.0447),
                                   'leaf operators with 10 args': (0.0831, 0.0591),
                                   'label 0': (0.1582, 0.3649),
                                   'label 1': (0.0918, 0.2887),
                                   'label 2': (0.0774, 0.2672),
                                   'label 3': (0.0828, 0.2756),
                                   'label 4': (0.0942, 0.2921),
                                   'label 5': (0.0888, 0.2845),
                                   'label 6': (0.0794, 0.2704),
                                   'label 7': (0.0757, 0.2645),
                                   'label 8': (0.0898, 0.2859),
                                   'label 9': (0.1619, 0.3684)}},
             'args_15': {'n': 10000,
                         'args': {'max_args': 15,
                                  'length_cuts': {'q10': 221, 'q25': 377, 'q50': 600, 'q75': 803, 'q90': 924},
                                  'depth_cut': 8},
                         'stats': {'length <= 221 (q10)': (0.1006, 0.3008),
                                   'length <= 377 (q25)': (0.2507, 0.4334),
                                   'length <= 600 (q50)': (0.5003, 0.5),
                                   'length <= 803 (q75)': (0.7502, 0.4329),
                                   'length <= 924 (q90)': (0.9004, 0.2995),
                                   'depth (mean)': (7.997, 0.0871),
                                   'depth >= 8': (0.9985, 0.0387),
                                   'args per operator (mean)': (8.2018, 0.5907),
                                   'operators with 15 args': (0.0633, 0.0346),
                                   'leaf operators with 15 args': (0.0596, 0.0471),
                                   'label 0': (0.1682, 0.374),
                                   'label 1': (0.0894, 0.2853),
                                   'label 2': (0.0792, 0.2701),
                                   'label 3': (0.0823, 0.2748),
                                   'label 4': (0.0928, 0.2902),
                                   'label 5': (0.0837, 0.2769),
                                   'label 6': (0.0785, 0.269),
                                   'label 7': (0.0731, 0.2603),
                                   'label 8': (0.0873, 0.2823),
                                   'label 9': (0.1655, 0.3716)}},
             'lra': {'n': 10000,
                     'args': {'max_args': 10,
                              'length_cuts': {'below the window': 500,
                                              'q10': 578,
                                              'q25': 699,
                                              'q50': 949,
                                              'q75': 1306,
                                              'q90': 1641,
                                              'window top': 1999},
                              'depth_cut': 9},
                     'stats': {'length <= 500 (below the window)': (0.0, 0.0),
                               'length <= 578 (q10)': (0.1016, 0.3021),
                               'length <= 699 (q25)': (0.2513, 0.4338),
                               'length <= 949 (q50)': (0.5008, 0.5),
                               'length <= 1306 (q75)': (0.7506, 0.4327),
                               'length <= 1641 (q90)': (0.9002, 0.2997),
                               'length <= 1999 (window top)': (1.0, 0.0),
                               'depth (mean)': (9.0, 0.0),
                               'depth >= 9': (1.0, 0.0),
                               'args per operator (mean)': (6.0194, 0.2214),
                               'operators with 10 args': (0.1121, 0.0275),
                               'leaf operators with 10 args': (0.0859, 0.0359),
                               'label 0': (0.1662, 0.3723),
                               'label 1': (0.0934, 0.291),
                               'label 2': (0.0776, 0.2675),
                               'label 3': (0.0811, 0.273),
                               'label 4': (0.0887, 0.2843),
                               'label 5': (0.0825, 0.2751),
                               'label 6': (0.078, 0.2682),
                               'label 7': (0.0706, 0.2562),
                               'label 8': (0.0886, 0.2842),
                               'label 9': (0.1733, 0.3785)}}},
 'logic': {'dev': {'n': 135529,
                   'args': {'ns': (0, 1, 2, 3, 4, 5, 6), 'depth_cut': 5},
                   'stats': {'operators N = 0': (0.0002, 0.0149),
                             'operators N = 1': (0.0171, 0.1297),
                             'operators N = 2': (0.0919, 0.2888),
                             'operators N = 3': (0.1716, 0.377),
                             'operators N = 4': (0.2241, 0.417),
                             'operators N = 5': (0.252, 0.4342),
                             'operators N = 6': (0.2431, 0.429),
                             'operators of the other formula (mean)': (0.9553, 1.2575),
                             'other formula has 0 operators': (0.4663, 0.4989),
                             'depth (mean)': (3.6663, 1.0664),
                             'depth >= 5': (0.2231, 0.4163),
                             "'not' among operators": (0.416, 0.1694),
                             'relation =': (0.0208, 0.1427),
                             'relation <': (0.1061, 0.308),
                             'relation >': (0.1071, 0.3092),
                             'relation ^': (0.0191, 0.137),
                             'relation |': (0.1021, 0.3028),
                             'relation v': (0.1024, 0.3031),
                             'relation #': (0.5424, 0.4982)}},
           'ops_7': {'n': 4707,
                     'args': {'ns': (7,), 'depth_cut': 6},
                     'stats': {'operators N = 7': (1.0, 0.0),
                               'operators of the other formula (mean)': (1.4436, 1.8992),
                               'other formula has 0 operators': (0.4408, 0.4965),
                               'depth (mean)': (5.0302, 0.7651),
                               'depth >= 6': (0.2615, 0.4395),
                               "'not' among operators": (0.4707, 0.1038),
                               'relation =': (0.0155, 0.1236),
                               'relation <': (0.1151, 0.3192),
                               'relation >': (0.1158, 0.32),
                               'relation ^': (0.0183, 0.1339),
                               'relation |': (0.1173, 0.3217),
                               'relation v': (0.1039, 0.3051),
                               'relation #': (0.5141, 0.4998)}},
           'ops_8': {'n': 3347,
                     'args': {'ns': (8,), 'depth_cut': 6},
                     'stats': {'operators N = 8': (1.0, 0.0),
                               'operators of the other formula (mean)': (1.7123, 2.1893),
                               'other formula has 0 operators': (0.4144, 0.4926),
                               'depth (mean)': (5.2471, 0.7945),
                               'depth >= 6': (0.3657, 0.4816),
                               "'not' among operators": (0.4764, 0.0959),
                               'relation =': (0.0161, 0.126),
                               'relation <': (0.1082, 0.3106),
                               'relation >': (0.1171, 0.3216),
                               'relation ^': (0.0158, 0.1248),
                               'relation |': (0.1162, 0.3205),
                               'relation v': (0.1105, 0.3136),
                               'relation #': (0.516, 0.4997)}},
           'ops_9': {'n': 2230,
                     'args': {'ns': (9,), 'depth_cut': 6},
                     'stats': {'operators N = 9': (1.0, 0.0),
                               'operators of the other formula (mean)': (1.7691, 2.3493),
                               'other formula has 0 operators': (0.4291, 0.495),
                               'depth (mean)': (5.4166, 0.7929),
                               'depth >= 6': (0.4498, 0.4975),
                               "'not' among operators": (0.4843, 0.0902),
                               'relation =': (0.0108, 0.1032),
                               'relation <': (0.1157, 0.3199),
                               'relation >': (0.1166, 0.3209),
                               'relation ^': (0.0112, 0.1053),
                               'relation |': (0.117, 0.3215),
                               'relation v': (0.1148, 0.3188),
                               'relation #': (0.5139, 0.4998)}},
           'ops_10': {'n': 1444,
                      'args': {'ns': (10,), 'depth_cut': 6},
                      'stats': {'operators N = 10': (1.0, 0.0),
                                'operators of the other formula (mean)': (1.9896, 2.5597),
                                'other formula has 0 operators': (0.3954, 0.4889),
                                'depth (mean)': (5.5319, 0.7487),
                                'depth >= 6': (0.4993, 0.5),
                                "'not' among operators": (0.4857, 0.0802),
                                'relation =': (0.0097, 0.098),
                                'relation <': (0.1184, 0.3231),
                                'relation >': (0.1281, 0.3342),
                                'relation ^': (0.009, 0.0945),
                                'relation |': (0.099, 0.2987),
                                'relation v': (0.1226, 0.328),
                                'relation #': (0.5132, 0.4998)}},
           'ops_11': {'n': 864,
                      'args': {'ns': (11,), 'depth_cut': 7},
                      'stats': {'operators N = 11': (1.0, 0.0),
                                'operators of the other formula (mean)': (1.919, 2.5753),
                                'other formula has 0 operators': (0.4109, 0.492),
                                'depth (mean)': (5.7477, 0.7193),
                                'depth >= 7': (0.1331, 0.3397),
                                "'not' among operators": (0.495, 0.0666),
                                'relation =': (0.0104, 0.1015),
                                'relation <': (0.1308, 0.3372),
                                'relation >': (0.0961, 0.2947),
                                'relation ^': (0.0058, 0.0759),
                                'relation |': (0.1146, 0.3185),
                                'relation v': (0.1366, 0.3434),
                                'relation #': (0.5058, 0.5)}},
           'ops_12': {'n': 853,
                      'args': {'ns': (12, 13, 14, 15, 16, 17, 18), 'depth_cut': 7},
                      'stats': {'operators N = 12': (0.5287, 0.4992),
                                'operators N = 13': (0.2849, 0.4514),
                                'operators N = 14': (0.1231, 0.3285),
                                'operators N = 15': (0.0445, 0.2063),
                                'operators N = 16': (0.0117, 0.1076),
                                'operators N = 17': (0.0059, 0.0763),
                                'operators N = 18': (0.0012, 0.0342),
                                'operators of the other formula (mean)': (2.068, 2.6058),
                                'other formula has 0 operators': (0.3822, 0.4859),
                                'depth (mean)': (5.9156, 0.7116),
                                'depth >= 7': (0.2005, 0.4004),
                                "'not' among operators": (0.516, 0.0585),
                                'relation =': (0.007, 0.0836),
                                'relation <': (0.1266, 0.3325),
                                'relation >': (0.1184, 0.3231),
                                'relation ^': (0.0059, 0.0763),
                                'relation |': (0.1489, 0.356),
                                'relation v': (0.1114, 0.3146),
                                'relation #': (0.4818, 0.4997)}}}}


def _values(task: str, split: str, rows) -> dict[str, np.ndarray]:
    spec = TARGETS[task][split]
    fn: Callable = listops_values if task == "listops" else logic_values
    return fn(rows, **spec["args"])


def compare(task: str, split: str, rows) -> list[tuple[str, float, float, float, bool]]:
    """(statistic, ours, target, tolerance, within) for every statistic of the split's target."""
    from rirlab.errors import UserError

    if split not in TARGETS.get(task, {}):
        known = ", ".join(TARGETS.get(task, {})) or "none"
        raise UserError(f"{task}: no target statistics for split '{split}' (known: {known})")
    spec = TARGETS[task][split]
    values = _values(task, split, rows)
    n = max(1, len(rows))
    out = []
    for name, (mean, sd) in spec["stats"].items():
        ours = float(values[name].mean()) if len(rows) else float("nan")
        tol = 4 * sd * np.sqrt(1 / n + 1 / spec["n"]) + FLOOR
        out.append((name, round(ours, 4), mean, round(float(tol), 4), bool(abs(ours - mean) <= tol)))
    return out


# --- derivation ---

def _summarise(values: dict[str, np.ndarray]) -> dict:
    return {k: (round(float(v.mean()), 4), round(float(v.std()), 4)) for k, v in values.items()}


def derive_listops(split: str, n: int = 10000, seed: int = 2024) -> dict:
    """The target of one ListOps split, from its original generator (module docstring)."""
    from rirlab.tasks import listops

    if split in ("dev", "test"):
        rows = listops.generate(90000, seed, 5, 20, max_len=None if split == "dev" else 1000)
        max_args = 5
    else:
        _, max_args, max_depth, lo, hi, steered = listops.SPLITS[split]
        rows = listops.generate(n, seed, max_args, max_depth, lo, hi, steered=steered)
    lengths = np.array([len(listops.tokenize(t)) for t, _ in rows])
    cuts = {q: int(np.quantile(lengths, float(q[1:]) / 100, method="inverted_cdf"))
            for q in ("q10", "q25", "q50", "q75", "q90")}
    if split in ("dev", "test"):  # the figure for the original test file: 4.7% of length <= 5
        cuts = {"short": 5, **cuts}
    if split.startswith("len_") or split == "lra":  # the window's ends are outside it (lo < length < hi)
        cuts = {"below the window": lo - 1, **cuts, "window top": hi}
    depth_cut = int(np.quantile([listops.shape(listops.tokenize(t))[0] for t, _ in rows], 0.9,
                                method="inverted_cdf"))
    args = {"max_args": max_args, "length_cuts": cuts, "depth_cut": depth_cut}
    return {"n": len(rows), "args": args, "stats": _summarise(listops_values(rows, **args))}


def derive_logic(split: str, root: str) -> dict:
    """The target of one logic split from the distributed files under ``root``."""
    from pathlib import Path

    from rirlab.tasks import logic

    names = [f"train{n}" for n in range(7)] if split in ("train", "dev") else [f"test{split[4:]}"]
    rows = [tuple(line.rstrip("\n").split("\t")) for name in names for line in open(Path(root) / name)]
    ns = tuple(sorted({max(logic.n_ops(p), logic.n_ops(h)) for _, p, h in rows}))
    depths = [max(logic.depth(logic.parse(p)), logic.depth(logic.parse(h))) for _, p, h in rows]
    args = {"ns": ns, "depth_cut": int(np.quantile(depths, 0.9, method="inverted_cdf"))}
    return {"n": len(rows), "args": args, "stats": _summarise(logic_values(rows, **args))}


if __name__ == "__main__":  # python -m rirlab.tasks.targets listops | logic DIR
    import pprint

    if sys.argv[1] == "listops":
        from rirlab.tasks.listops import ALL_SPLITS

        for s in ALL_SPLITS[1:]:
            print(f"{s!r}:", pprint.pformat(derive_listops(s), width=120, sort_dicts=False), ",", flush=True)
    else:
        from rirlab.tasks.logic import ALL_SPLITS

        for s in ALL_SPLITS[1:]:
            print(f"{s!r}:", pprint.pformat(derive_logic(s, sys.argv[2]), width=120, sort_dicts=False), ",")
