"""Generic quadrature for the EP / QP site projections: composite 20-point Gauss-Legendre panels,
moments of a density on panels, and QP's L2-Wasserstein standard deviation.

Nothing here knows a likelihood.  The density is a jitted function given to the factories
:func:`wasserstein_rule` and :func:`edge_rules`, ``log_density(x, loc, scale2, power, log_norm)``
(four numbers that the likelihood's module defines, plus the log normaliser), and for
``moments_on_edges`` ``extra_terms(x, loc, power)``, the integrands of two extra tilted
expectations (the likelihood-parameter gradients); each likelihood's module makes its own rules
at import (no compilation then), which compile with its density alone.  The functions given
must be marked by :func:`gpdsl._jit.projections.site_function` so that the rules' disk cache is
found by later processes.  (Factories rather than functions taken as arguments: a jitted
function named inside jitted code, to be passed on, is a run-time object address to Numba, and
code holding one cannot be cached.)

QP (Zhang et al. 2020, eq. 7) keeps the tilted mean and takes the L2-Wasserstein standard
deviation

    sigma* = int phi(Phi^-1(F(f))) df,      F the CDF of the tilted distribution,

which never exceeds the EP one (their Theorem 2).  The CDF at the nodes comes from the same
rule (``_GL_CUMULATIVE`` integrates the interpolant of the density from the panel's left end to
each node), so one call costs a few hundred density evaluations and no root finding.
"""
import math

import numpy as np
from numba import njit

from .special import GL_NODES, GL_WEIGHTS, norm_pdf, norm_ppf

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
WINDOW = 10.0               # window half-width in (local) standard deviations
MAX_PANELS = 256            # per zone of wasserstein_sd; reached only far outside the likelihoods' ranges

# or for _T_S2_MAX over scale^2 df, the rule's x = (f - y) / (scale sqrt(df)): below _T_S2_POINT the
# cavity is narrow on the likelihood's scale and the tilted moments are its expansion in the cavity variance
# (_student_t_degenerate; its error is O(s2^2), within 1e-16 of 40-digit quadrature from s2 = 1e-8
# down, where the panels' rounding had grown to 1e-12 and at s2 ~ 1e-38 gave log Z 7.7 for 0.14
# and a tilted variance 2e6 times the cavity's: fuzz, StudentT EP at kernel variance 5e-42);
# above _T_S2_MAX (a scale ~1e-125 cavity sds or less; scale^2 df underflowing to 0 among them)
# the rule's x^2 would overflow: refused as nan, the site skipped.  Without these tests
# var / (scale^2 df) or 1 / s2 raised Numba's bare ZeroDivisionError.
_T_S2_POINT = 1e-8
_T_S2_MAX = 1e250

# S[i, j] = int_{-1}^{x_i} l_j(x) dx for the Lagrange basis l_j of GL_NODES (20-point rule), so
# that half * S @ q integrates the degree-19 interpolant of q from a panel's left end to its nodes
# (computed to 50 digits with mpmath through the Legendre expansion of l_j, then rounded).
_GL_CUMULATIVE = np.array([
    0.008807003569576059, -0.0033259921113605213, 0.002514904369202617, -0.002075991549721604,
    0.001773595821542047, -0.0015393435734972353, 0.0013448574604825467, -0.0011760772903356372,
    0.0010252858173092026, -0.0008879872152758975, 0.0007614897342073984, -0.000644192532048838,
    0.0005352003528603544, -0.00043410682048157056, 0.0003408740373946344, -0.00025577642456203406,
    0.00017940120635288962, -0.00011272554523794784, 5.735941380084346e-05, -1.637790530223152e-05,
    0.019056913191532313, 0.02030071490019347, -0.005455220582827554, 0.0037644148594956706,
    -0.002991137249966082, 0.002502020356841094, -0.0021396714065258777, 0.0018460790357716671,
    -0.0015949102221615554, 0.0013726221064095023, -0.0011717097992166232, 0.0009878631107444976,
    -0.0008186233227215968, 0.000662696780732794, -0.000519591164700127, 0.0003894331967957577,
    -0.00027291488778031456, 0.00017137900328226269, -8.716926127422328e-05, 2.4884077461134354e-05,
    0.016907192144415287, 0.044135537292111504, 0.031336024167054534, -0.0073533054264483325,
    0.0047668344906238716, -0.003654425820083158, 0.0029835015525452348, -0.002503429277748819,
    0.0021240894373323327, -0.001805548815289263, 0.0015277228141330344, -0.0012797021923861658,
    0.0010553365043554977, -0.0008511880753506564, 0.0006655124185854775, -0.000497742184894225,
    0.0003482652893164113, -0.00021844709629926292, 0.00011102609147111721, -3.168156477032521e-05,
    0.018053103689825094, 0.03876609591527608, 0.06820596698145862, 0.04163837078835238,
    -0.009049820661947887, 0.005607162065040851, -0.004168486318377061, 0.003323883259621591,
    -0.0027335873920115174, 0.0022763201350946304, -0.0018987403749111615, 0.0015742194989665746,
    -0.0012884030588893208, 0.001033270202554859, -0.000804406563788594, 0.000599672727203867,
    -0.0004185749757237931, 0.00026209597820330905, -0.00013305917652273476, 3.794545835540051e-05,
    0.017307521386769747, 0.041792877914993, 0.05974114545542386, 0.09067043029140287,
    0.05096505990862022, -0.010521468416561305, 0.006292894893460344, -0.004554003709511371,
    0.0035501945004138905, -0.002860076637375706, 0.0023336889757211493, -0.001905269159425904,
    0.0015420945528447454, -0.0012266051593027231, 0.0009490754042644743, -0.0007042820251153474,
    0.0004899316396713149, -0.0003060383165010239, 0.00015512141680980215, -4.419937675282173e-05,
    0.01784340868796502, 0.039741951767084206, 0.06460978900475392, 0.07932608346655515,
    0.11100375899965687, 0.059097265980759206, -0.011739454097723843, 0.006817936877394748,
    -0.00481465178206053, 0.003671399756946685, -0.0028949365193058655, 0.002310034006029237,
    -0.0018399834904568595, 0.0014467135858018336, -0.0011099061060302051, 0.0008184758471209989,
    -0.0005667635923888404, 0.0003528845689588959, -0.0001784866342661431, 5.0798946690490896e-05,
    0.017434125797913834, 0.04126112010800208, 0.06125216765413554, 0.08591279250706264,
    0.09705927037995002, 0.12873104672015268, 0.06584431922458832, -0.01267771837556401,
    0.007174487876332381, -0.004950272484679316, 0.0036915692058722633, -0.0028448524413177924,
    0.002213746773552524, -0.001712433026614571, 0.001298469155501295, -0.0009494213952589741,
    0.0006534153337023006, -0.0004050896176619035, 0.0002043185892019767, -5.8063935698355755e-05,
    0.0177597918048093, 0.04007394562973377, 0.06377619567106786, 0.08132874899217567,
    0.1051968534807117, 0.11252342061278142, 0.14343780934152953, 0.07104805465919102,
    -0.01331551441478615, 0.0073564939665369585, -0.004960806797296586, 0.00361395265350452,
    -0.0027151650926472617, 0.0020516064787333126, -0.0015304851660941012, 0.0011061941336394112,
    -0.000755080551441122, 0.00046546031926548564, -0.00023390701919901707, 6.634258236470591e-05,
    0.017492943720548024, 0.04103552740045681, 0.061779654617054196, 0.0848027836316695,
    0.09950426672306674, 0.12200933467744343, 0.12535506182551728, 0.15477992585014688,
    0.07458649323630187, -0.013638560501320536, 0.007360943254403378, -0.004847744000435449,
    0.0034425040583212223, -0.0025114114387912957, 0.0018303138833247186, -0.0013018732030282293,
    0.0008788177638618597, -0.0005376412951900006, 0.00026887344479525264, -7.606478979074808e-05,
    0.017716401026732234, 0.04023659062305236, 0.06341283349604175, 0.08203575748334453,
    0.10383860747705716, 0.11535374797586066, 0.1359562665241073, 0.1352528622355893,
    0.1624918715028136, 0.07637669356536292, -0.013639640120634098, 0.0071884094299984845,
    -0.004614701894451398, 0.0031825004446296924, -0.002239987429312057, 0.001557236807507638,
    -0.001035138496715709, 0.0006267980032843917, -0.0003114372391533702, 8.780745138725769e-05,
    0.01752619968776486, 0.040912867039540314, 0.06204525033082467, 0.08431188007342046,
    0.1003728830097328, 0.12043451939083047, 0.12850613800454694, 0.14671081121283344,
    0.14198457704260525, 0.16639302725135996, 0.07637669356536292, -0.013318885030209861,
    0.006843247082792765, -0.004267628074930688, 0.0028407839856577585, -0.001908487659816716,
    0.0012409840933602112, -0.0007407851619326927, 0.0003648391773345802, -0.00010239388758011591,
    0.017690071928942865, 0.04033255635559169, 0.06320968962929907, 0.08239792381284289,
    0.10323199302026867, 0.11636421807819369, 0.1342000498879679, 0.13865360526006082,
    0.15402073047303919, 0.14539244387632247, 0.1663919476320464, 0.07458649323630187,
    -0.012683816531764843, 0.006333576623659353, -0.003814802715925019, 0.002425853094173691,
    -0.0015260420549647524, 0.0008923937170548684, -0.0004340976000698664, 0.00012106341860409421,
    0.017547664556787412, 0.04083533681958596, 0.06220658801484358, 0.08403182212814587,
    0.10082392568360102, 0.11972501712761252, 0.12963703197044332, 0.1448112744110293,
    0.14555903381909924, 0.15771419392802244, 0.14539689316418888, 0.1624885008873899,
    0.07104805465919102, -0.011749170892352912, 0.005671111348736992, -0.003266733663471264,
    0.0019479925845290835, -0.0011041473369587977, 0.000527484170653173, -0.00014578466565718116,
    0.017672071074850474, 0.040397111211184965, 0.06307713795177097, 0.08262332624300245,
    0.10287954121249941, 0.11689606280601712, 0.1334010714757912, 0.13988236254482952,
    0.15201783891392154, 0.1490618179248536, 0.15770365961540517, 0.14199849859627137,
    0.15477382769394607, 0.06584431922458832, -0.01053651475863425, 0.004870849437290418,
    -0.00263605093035789, 0.0014198806799735233, -0.000659690307615135, 0.00017988134123828566,
    0.017563208192461627, 0.040779916434653084, 0.06231916376515017, 0.08384350516909359,
    0.10111164397011943, 0.11930443806754862, 0.1302419248633748, 0.1439360928088389,
    0.14686295246657452, 0.15564832365003173, 0.14908198737377917, 0.15398763825466427,
    0.1352781724409873, 0.14342809254690048, 0.059097265980759206, -0.009073639182416432,
    0.003950658110149602, -0.001937740670644858, 0.0008594780333027322, -0.00022940154881290084,
    0.01765820651590494, 0.04044630838357714, 0.06297808665061008, 0.08278680993703344,
    0.10263440184235578, 0.11724545655725395, 0.13291524360847934, 0.1405540147655373,
    0.15107825563202965, 0.1504196981550047, 0.15561346376810156, 0.14562279197218986,
    0.1466501130278934, 0.12539574355571628, 0.12871600037807973, 0.05096505990862022,
    -0.007393688714698116, 0.002930902878685201, -0.0011914481146060544, 0.0003064857523823693,
    0.017576061680796718, 0.04073448897690968, 0.062409952355905754, 0.08369531655242854,
    0.10133044709003657, 0.118998938525307, 0.13065536824662177, 0.14338451237727137,
    0.14759876697363716, 0.154652127505637, 0.1504770669956312, 0.15190657386461526,
    0.13877222605876047, 0.13585712476755368, 0.11258736989647757, 0.11097994047918833,
    0.04163837078835238, -0.005533918647349555, 0.001835333885110864, -0.00043909655067297525,
    0.017645688703922444, 0.04049040370891582, 0.06289049543040832, 0.08292847628738834,
    0.10242786200213466, 0.11752901954293293, 0.13253982652452728, 0.14104077281402655,
    0.15045268866498993, 0.15122566431659282, 0.1545589359460151, 0.1470488970352714,
    0.14459953859613087, 0.1287051368966314, 0.12184895778160157, 0.09716328532661657,
    0.09063004700315308, 0.031336024167054534, -0.003534107491724565, 0.0007068149947368315,
    0.017589123061690984, 0.04068859906166116, 0.0625006693308268, 0.08354965646448506,
    0.10154068662044467, 0.11871412312621854, 0.13102594166844383, 0.14291473264110366,
    0.14818512336185924, 0.15392509692994247, 0.15138076502431635, 0.1507678966947653,
    0.14025003028261038, 0.13382830985570252, 0.11569251160467732, 0.10492125706720652,
    0.07951232671720908, 0.06812726891693661, 0.02030071490019347, -0.0014429060523801932,
    0.01763038504445435, 0.0405440703865861, 0.06278477387934701, 0.08309734037035187,
    0.10218589624180247, 0.11785365792412378, 0.1321227452696582, 0.1415609089655217,
    0.14981717900465258, 0.15199189739651844, 0.15364137434600175, 0.14814770065529453,
    0.14327218660871768, 0.1303437809886941, 0.11973387553501565, 0.10015652399569838,
    0.08535273312642636, 0.06015714396490645, 0.04392742191174746, 0.008807003569576059,
]).reshape(20, 20)



@njit(cache=True, nogil=True)
def panel_count(length, width):
    """Number of equal panels of width <= width covering a length >= 0, capped at MAX_PANELS."""
    if not length > 0.0:
        return 0
    count = math.ceil(length / width)
    if count > MAX_PANELS:
        return MAX_PANELS
    return max(int(count), 1)

@njit(cache=True, inline="always")
def _panel_cumulative(q, half, start, out, offset):
    """The mass of one GL panel of half-width ``half`` with density values ``q`` at its nodes;
    writes ``start`` plus the panel's mass left of node i into ``out[offset + i]`` (the
    cumulative rule ``_GL_CUMULATIVE``), the running F of the Wasserstein integrals."""
    nq = q.shape[0]
    panel = 0.0
    for i in range(nq):
        s = 0.0
        for j in range(nq):
            s += _GL_CUMULATIVE[i, j] * q[j]
        out[offset + i] = start + half * s
        panel += GL_WEIGHTS[i] * q[i]
    return half * panel


def wasserstein_rule(log_density):
    """:func:`wasserstein_sd` for the density ``log_density``: a jitted
    ``wasserstein_sd(loc, scale2, power, log_norm, lo, mid, hi, width_lo, width_hi)``."""
    @njit(cache=True, nogil=True)
    def wasserstein_sd(loc, scale2, power, log_norm, lo, mid, hi, width_lo, width_hi):
        """sigma* = int phi(Phi^-1(F(x))) dx of eq. (7) on [lo, hi] by composite 20-point GL, the
        density exp(log_density(x, loc, scale2, power, log_norm)) normalised (the probit's and
        Poisson's rule; :func:`wasserstein_sd_edges` is the logit's and Student-t's).

        Panels are at most ``width_lo`` wide on [lo, mid] and ``width_hi`` on [mid, hi].  (Kept apart
        from wasserstein_sd_edges, whose panel array and two-sided tail sums compile for 0.15 s more
        in every probit QP kernel; the light tails here need no right-hand sums.)  F at each
        node is the running integral of the density (panel integrals plus the within-panel
        cumulative rule), normalised by the total so that F runs from 0 to 1 across the window;
        phi(Phi^-1(F)) = phi(Phi^-1(1 - F)), and the smaller of F and 1 - F keeps its accuracy in
        both tails.  Nodes where that tail probability is <= 0 contribute 0 (the limit at F = 0, 1).
        """
        n_lo = panel_count(mid - lo, width_lo)
        n_hi = panel_count(hi - mid, width_hi)
        n_panels = n_lo + n_hi
        nq = GL_NODES.shape[0]
        cum = np.empty(n_panels * nq)
        wts = np.empty(n_panels * nq)
        q = np.empty(nq)
        total = 0.0
        for p in range(n_panels):
            if p < n_lo:
                a = lo + (mid - lo) * p / n_lo
                b = lo + (mid - lo) * (p + 1) / n_lo
            else:
                a = mid + (hi - mid) * (p - n_lo) / n_hi
                b = mid + (hi - mid) * (p - n_lo + 1) / n_hi
            half = 0.5 * (b - a)
            for j in range(nq):
                q[j] = math.exp(log_density(a + half * (GL_NODES[j] + 1.0), loc, scale2, power, log_norm))
                wts[p * nq + j] = half * GL_WEIGHTS[j]
            total += _panel_cumulative(q, half, total, cum, p * nq)
        if not total > 0.0:                        # the density underflowed everywhere: no sigma*
            return math.nan                        # (the sweep then keeps the site, see _site_update)
        sd = 0.0
        for k in range(n_panels * nq):
            tail = min(cum[k], total - cum[k]) / total
            if tail > 0.0:
                sd += wts[k] * norm_pdf(norm_ppf(tail))
        return sd
    return wasserstein_sd


def edge_rules(log_density, extra_terms):
    """:func:`moments_on_edges` and :func:`wasserstein_sd_edges` for the density ``log_density``
    and the extra integrands ``extra_terms``: jitted
    ``moments_on_edges(loc, scale2, power, edges, count, extra)`` and
    ``wasserstein_sd_edges(loc, scale2, power, log_norm, edges, count)``."""
    @njit(cache=True, nogil=True)
    def moments_on_edges(loc, scale2, power, edges, count, extra):
        """(log mass, mean, variance, e1, e2) of h(x) = exp(log_density(x, loc, scale2, power, 0))
        by composite 20-point GL on the panels [edges[p], edges[p + 1]], p < count - 1.

        Each panel's mass, mean and central second moment are summed about the panel's centre with
        its largest log h subtracted, and the panels are combined at the end (the overall mean, then
        variance = sum_p w_p (M2_p + (m_p - mean)^2) / sum_p w_p): no sum cancels more than within
        one panel, whatever the distance between the tilted mean and the coordinates' origin, and
        no h under- or overflows (log Z of -1e4 is fine).  With ``extra``, e1 and e2 are tilted
        expectations for the likelihood-parameter gradients, those of the pair
        ``extra_terms(x, loc, power)`` (the likelihood's; without ``extra`` they are not evaluated).
        """
        n_panels = count - 1
        nq = GL_NODES.shape[0]
        log_w = np.empty(n_panels)
        means = np.empty(n_panels)
        m2 = np.empty(n_panels)
        ex1 = np.empty(n_panels)
        ex2 = np.empty(n_panels)
        lv = np.empty(nq)
        top = -math.inf
        for p in range(n_panels):
            a = edges[p]
            b = edges[p + 1]
            half = 0.5 * (b - a)
            centre = 0.5 * (a + b)
            peak = -math.inf
            for j in range(nq):
                lv[j] = log_density(centre + half * GL_NODES[j], loc, scale2, power, 0.0)
                peak = max(peak, lv[j])
            means[p], m2[p], ex1[p], ex2[p] = centre, 0.0, 0.0, 0.0
            if not (peak > -math.inf and half > 0.0):
                log_w[p] = -math.inf
                continue
            s0 = s1 = s2 = e1 = e2 = 0.0
            for j in range(nq):
                w = GL_WEIGHTS[j] * math.exp(lv[j] - peak)
                d = half * GL_NODES[j]
                s0 += w
                s1 += w * d
                s2 += w * d * d
                if extra:
                    t1, t2 = extra_terms(centre + d, loc, power)
                    e1 += w * t1
                    e2 += w * t2
            shift = s1 / s0
            log_w[p] = peak + math.log(half * s0)
            means[p] = centre + shift
            m2[p] = max(s2 / s0 - shift * shift, 0.0)
            ex1[p] = e1 / s0
            ex2[p] = e2 / s0
            top = max(top, log_w[p])
        if not top > -math.inf:
            return -math.inf, math.nan, math.nan, math.nan, math.nan
        total = mean = 0.0
        for p in range(n_panels):
            w = math.exp(log_w[p] - top)
            total += w
            mean += w * means[p]
        mean /= total
        var = e1 = e2 = 0.0
        for p in range(n_panels):
            w = math.exp(log_w[p] - top)
            d = means[p] - mean
            var += w * (m2[p] + d * d)
            e1 += w * ex1[p]
            e2 += w * ex2[p]
        return top + math.log(total), mean, var / total, e1 / total, e2 / total




    @njit(cache=True, nogil=True)
    def wasserstein_sd_edges(loc, scale2, power, log_norm, edges, count):
        """sigma* = int phi(Phi^-1(F(x))) dx of eq. (7) by composite 20-point GL on the panels
        [edges[p], edges[p + 1]], p < count - 1, which cover the support (up to a negligible mass),
        the density exp(log_density(x, loc, scale2, power, log_norm)) normalised.

        F at each node is the running integral of the density (panel integrals plus the within-panel
        cumulative rule), normalised by the total so that F runs from 0 to 1 across the window;
        phi(Phi^-1(F)) = phi(Phi^-1(1 - F)), and the smaller of F and 1 - F keeps its accuracy in
        both tails: 1 - F is summed from the right (the masses of the panels after the node's, plus
        the rest of its own) rather than formed as a difference with the total, which long heavy
        tails (Student-t) need.  Nodes where that tail probability is <= 0 contribute 0 (the limit
        at F = 0, 1).
        """
        n_panels = count - 1
        nq = GL_NODES.shape[0]
        local = np.empty(n_panels * nq)            # the panel's mass left of each node
        mass = np.empty(n_panels)
        before = np.empty(n_panels)                # the mass of the panels left of panel p
        q = np.empty(nq)
        total = 0.0
        for p in range(n_panels):
            a = edges[p]
            half = 0.5 * (edges[p + 1] - a)
            for j in range(nq):
                q[j] = math.exp(log_density(a + half * (GL_NODES[j] + 1.0), loc, scale2, power, log_norm))
            mass[p] = _panel_cumulative(q, half, 0.0, local, p * nq)
            before[p] = total
            total += mass[p]
        if not total > 0.0:                        # the density underflowed everywhere: no sigma*
            return math.nan                        # (the sweep then keeps the site, see _site_update)
        sd = 0.0
        right = 0.0                                # the mass of the panels right of panel p
        for p in range(n_panels - 1, -1, -1):
            half = 0.5 * (edges[p + 1] - edges[p])
            for i in range(nq):
                k = p * nq + i
                tail = min(before[p] + local[k], right + (mass[p] - local[k])) / total
                if tail > 0.0:
                    sd += half * GL_WEIGHTS[i] * norm_pdf(norm_ppf(tail))
            right += mass[p]
        return sd
    return moments_on_edges, wasserstein_sd_edges


# The log-concave rule's window: from the mode out to where log q has fallen by this much
# (e^-46 ~ 1e-20 of the peak), in steps doubling from the local sd, then bisected to within the
# local sd there; panels graded from the local sd at each end up to the one at the mode.
CONCAVE_TAIL_LOG = 46.0
CONCAVE_MAX_NEWTON = 200
# A panel spans at most this many nats of g's fall at its outer edge: the 20-point rule on
# exp(a f) over a width w errs by ~(a w)^40 / 1e72 relative, 1e-32 at a w = 10 (a Gaussian's tail at
# 9.6 sd asks 1.04 sd, above the sd bound: no panel more there).
CONCAVE_PANEL_FALL = 10.0
# ... and its likelihood bends g by at most this many nats where the likelihood's curvature more
# than doubles across it (measured: 1e-2 gives the Poisson-log tilted moments to 2e-14 of mpmath
# for cavity variances 1 to 1e10, where 1e-3 and 1e-4 add panels and no accuracy).
CONCAVE_PANEL_BEND = 1e-2


def log_concave_rules(log_likelihood):
    """EP's moments and QP's sigma* of a site whose likelihood is log-concave in f, for the
    jitted ``log_likelihood(y, f, params) -> (log p, d log p / df, d^2 log p / df^2, d log p / d
    theta)`` (theta: the likelihood's one parameter, or 0.0 for none): a jitted
    ``tilted(y, mu, var, params, qp) -> (log Z, mean, variance, E[d log p / d theta])``.

    The tilted log density g(f) = log p(y | f) - (f - mu)^2 / (2 var) is concave with
    g'' <= -1/var, so it has one mode m, found by Newton's method kept inside a bracket of the
    sign change of g' (bisection where a Newton step leaves it or does not halve the step before
    last; before there is a bracket, steps of at most max(1, 2^-20 |mu|), doubling), to 1e-13 of
    the local sd s = (-g''(m))^-1/2 (NaN moments if it fails).  The window reaches from m, in
    steps doubling from s and then by bisection to within the local sd there, to where g has
    fallen by :data:`CONCAVE_TAIL_LOG` on each side (by concavity g falls monotonically
    beyond); each side is cut into panels of the 20-point Gauss-Legendre rule, from its end in,
    each no wider than the local sd (-g'')^-1/2 and :data:`CONCAVE_PANEL_FALL` nats of g's
    slope at its outer edge, nor twice the panel outside it, and halved while the likelihood bends
    g across it by more than :data:`CONCAVE_PANEL_BEND` (at most :data:`MAX_PANELS` a side), so
    that a fall far steeper than at m (a count of 0 under a wide cavity: sd ~1 where exp(f) rises,
    1e20 at m) is resolved.  The sums run with g(m) subtracted and about m, so nothing
    under- or overflows and the variance cancels no more than within O(s).  With ``qp`` the
    variance is QP's sigma*^2 (Zhang et al. eq. 7, the running F as in :func:`wasserstein_rule`).
    """
    @njit(cache=True, nogil=True)
    def tilted(y, mu, var, params, qp):
        inv_var = 1.0 / var
        lo, hi = -math.inf, math.inf
        f = mu
        # Unbracketed, a step is at most ``cap``, doubled at each such step: a full Newton step
        # from the cavity can land where exp(f) overflows (Poisson-log, a count of 5e5: a step of
        # 2.5e5 from f = 0); a few doubling steps bracket the mode and Newton ends inside.  The cap
        # starts at 2^-20 |mu| where that is above 1: smaller steps from mu ~ 1e19 do not move f.
        cap = max(1.0, abs(mu) * 2.0 ** -20)
        # Bracketed, a Newton step longer than half the step before last bisects instead (rtsafe,
        # Numerical Recipes 9.4): from f = 587 above the mode -34 (Poisson-log, y = 0, cavity
        # variance 3e26) Newton on -e^f + c moves 1 a step and ran out of iterations.
        step_taken = step_before = math.inf
        converged = False
        for _ in range(CONCAVE_MAX_NEWTON):
            _, d1, d2, _ = log_likelihood(y, f, params)
            slope = d1 - (f - mu) * inv_var
            curve = d2 - inv_var
            if slope > 0.0:
                lo = f
            else:
                hi = f
            step = -slope / curve
            bracketed = not (math.isinf(lo) or math.isinf(hi))
            capped = not bracketed and not abs(step) <= cap
            if capped:
                step = cap if slope > 0.0 else -cap
                cap *= 2.0
            nxt = f + step
            # (a step to outside the bracket is no sign of the mode: where exp(f) underflows, the
            # curvature is the cavity's alone and a step of 3e4 is 1e-13 of its sd 6e19)
            at_mode = not capped and abs(step) <= 1e-13 / math.sqrt(-curve) and lo <= nxt <= hi
            if not at_mode and (not (lo <= nxt <= hi) or (bracketed and abs(step) > 0.5 * step_before)):
                nxt = 0.5 * (lo + hi)
            step_before, step_taken = step_taken, abs(nxt - f)
            # A capped step says nothing of the distance to the mode: from a cavity mean of 8.7e18
            # (Poisson-log, zero counts, kernel variance ~1e40) the step of 1 was below 1e-13 |f|
            # and ended the search at f = mu, where exp(f) overflows: log p = -inf, s = 0, no panels.
            if at_mode or (not capped and abs(nxt - f) <= 1e-13 * (1.0 + abs(f))):
                f = nxt
                converged = True
                break
            f = nxt
        if not converged:
            # No mode within CONCAVE_MAX_NEWTON steps (a cavity mean of ~1e300): NaN moments,
            # which the sweeps skip as an improper site and the evidence reports as not finite.
            return math.nan, math.nan, math.nan, math.nan
        m = f
        lp, _, d2, _ = log_likelihood(y, m, params)
        peak = lp - 0.5 * (m - mu) * (m - mu) * inv_var
        s = 1.0 / math.sqrt(inv_var - d2)
        # Panel edges, ascending from the left end through m to the right end; each side's cut
        # from its end in to m, at distances ``cuts`` from m (descending to 0).
        edges = np.empty(2 * MAX_PANELS + 1)
        cuts = np.empty(MAX_PANELS + 1)
        n_panels = 0
        for side in range(2):
            direction = -1.0 if side == 0 else 1.0
            # Out from m, in steps doubling from s, to where g has fallen by CONCAVE_TAIL_LOG ...
            inside, t = 0.0, s
            for _ in range(200):
                x = m + direction * t
                g = log_likelihood(y, x, params)[0] - 0.5 * (x - mu) * (x - mu) * inv_var
                if not g > peak - CONCAVE_TAIL_LOG:
                    break
                inside = t
                t *= 2.0
            # ... then by bisection until g at ``inside`` is within a nat of that: the doubling
            # can overshoot a fall far steeper than at m by any multiple of s (a count of 0 under
            # a cavity sd of 6e19: g falls within ~1 of f = 4, 6e19 beyond m at the first step).
            g_inside = peak
            for _ in range(200):
                mid = 0.5 * (inside + t)
                if not (g_inside > peak - CONCAVE_TAIL_LOG + 1.0 and inside < mid < t):
                    break
                x = m + direction * mid
                g = log_likelihood(y, x, params)[0] - 0.5 * (x - mu) * (x - mu) * inv_var
                if g > peak - CONCAVE_TAIL_LOG:
                    inside, g_inside = mid, g
                else:
                    t = mid
            # Panels from the end in: one over (inside, t], where g <= peak - CONCAVE_TAIL_LOG + 1,
            # then each no wider than the local scale at its outer edge (the local sd, and
            # CONCAVE_PANEL_FALL nats of g's slope, which grows outwards) nor twice the panel
            # outside it, so that they grow from the end's scale (~0.15 at that fall) up to s
            # at m; a curvature that grows inwards is the bend's test below.  The last of
            # MAX_PANELS takes whatever is left.
            cuts[0] = t
            count = 0
            width = t - inside
            while t > 0.0:
                if count == MAX_PANELS - 1 or not width < t:
                    width = t
                t -= width
                count += 1
                cuts[count] = t
                x = m + direction * t
                _, d1, d2, _ = log_likelihood(y, x, params)
                local = 1.0 / math.sqrt(inv_var - d2)
                fall = abs(d1 - (x - mu) * inv_var)
                if fall * local > CONCAVE_PANEL_FALL:
                    local = CONCAVE_PANEL_FALL / fall
                width = min(local if count == 1 else min(2.0 * width, local), t)
                # Halved while the likelihood's curvature more than doubles across the panel and
                # bends g by more than CONCAVE_PANEL_BEND nats: the scale of exp(f) is 1 whatever
                # the sd (a count of 0 under a cavity sd of 1e3: the panel of sd 267 next to the
                # mode, where -exp(f) curves g by 7e-6, erred by 1e-10 of Z).
                for _ in range(60):
                    d2_in = log_likelihood(y, m + direction * (t - width), params)[2]
                    bend = abs(d2_in - d2) * width * width
                    if not (bend > CONCAVE_PANEL_BEND and max(abs(d2_in), abs(d2)) > 2.0 * min(abs(d2_in), abs(d2))):
                        break
                    width *= 0.5
            for k in range(count + 1):
                if side == 0:
                    edges[k] = m - cuts[k]
                else:
                    edges[n_panels + k] = m + cuts[count - k]
            n_panels += count
        nq = GL_NODES.shape[0]
        s0 = s1 = s2 = e = 0.0
        cum = np.empty(n_panels * nq)
        wts = np.empty(n_panels * nq)
        q = np.empty(nq)
        total = 0.0
        for p in range(n_panels):
            a = edges[p]
            half = 0.5 * (edges[p + 1] - a)
            for j in range(nq):
                x = a + half * (GL_NODES[j] + 1.0)
                lpx, _, _, dth = log_likelihood(y, x, params)
                w = math.exp(lpx - 0.5 * (x - mu) * (x - mu) * inv_var - peak)
                q[j] = w
                d = x - m
                wj = half * GL_WEIGHTS[j] * w
                s0 += wj
                s1 += wj * d
                s2 += wj * d * d
                e += wj * dth
                wts[p * nq + j] = half * GL_WEIGHTS[j]
            if qp:
                total += _panel_cumulative(q, half, total, cum, p * nq)
        shift = s1 / s0
        log_z = peak + math.log(s0) - 0.5 * math.log(2.0 * math.pi * var)
        variance = max(s2 / s0 - shift * shift, 0.0)
        if qp:
            sd = 0.0
            for k in range(n_panels * nq):
                tail = min(cum[k], total - cum[k]) / total
                if tail > 0.0:
                    sd += wts[k] * norm_pdf(norm_ppf(tail))
            variance = sd * sd
        return log_z, m + shift, variance, e / s0
    return tilted
