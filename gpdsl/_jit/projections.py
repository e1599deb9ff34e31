"""Jitted EP and QP projections of a tilted distribution onto a Gaussian (one site of a sweep).

The tilted distribution of a site is ``q(f) = p(y | f) N(f | mu, sigma^2) / Z`` with the cavity
N(mu, sigma^2).  EP keeps its mean and variance; QP (Zhang et al. 2020, eq. 7) keeps the mean
and takes the L2-Wasserstein standard deviation

    sigma* = int phi(Phi^-1(F(f))) df,      F the CDF of q,

which never exceeds the EP one (their Theorem 2).  The likelihood ``kind`` is one of the codes
``PROBIT`` / ``POISSON_SQUARE`` / ``GAUSSIAN`` / ``LOGIT`` / ``STUDENT_T`` (0 to 4;
``gpdsl.likelihoods`` uses these constants; LOGIT is a numpy uint8, see :func:`site_projection`):

* probit with bias, p(y | f) = Phi(y (f + bias)), y in {-1, +1} (paper appendix C.1);
* Poisson with square link, p(y | f) = f^{2y} exp(-f^2) / y!, y in {0, 1, 2, ...} (appendix C.2);
* Gaussian noise, whose tilted distribution is Gaussian (EP is exact; a check of the sweeps);
* logit with bias, p(y | f) = sigma(y (f + bias)), y in {-1, +1}, params (bias,);
* Student-t, p(y | f) = Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale)
  (1 + (y - f)^2 / (df scale^2))^(-(df+1)/2), params (df, scale).

:func:`project` projects one site for any kind; :func:`site_projection`, the entry point of the
site-sweep kernels, does the same compiled with only the code of the fit's likelihood and method;
:func:`tilted_log_z_param_gradient` gives d log Z / d theta in the likelihood's parameters.

Probit, Poisson and Gaussian: log Z and the moments are closed forms.  sigma* uses a fixed
composite 20-point Gauss-Legendre rule on a window set from the closed-form moments: the CDF at
the nodes comes from the same rule (``_GL_CUMULATIVE`` integrates the interpolant of the density
from the panel's left end to each node), so one call costs ~150-300 density evaluations and no
root finding.  The closed-form CDFs (Owen's T for the probit, finite Gaussian partial-moment sums
for Poisson) are exported for reference and tests: in the probit case they lose relative
accuracy when Z underflows (z << 0), which the quadrature does not, since it works with
log-densities throughout.

Logit and Student-t: log Z, the mean, the variance and sigma* all come from one set of panels of
the same composite rule (:func:`_moments_on_edges`, :func:`_wasserstein_sd_edges`), ~200-500
density evaluations for the logit and ~300-1,500 for the Student-t.

Window and panel widths (checked against a 4x finer rule over a twice wider window for cavity
means -30..30 and standard deviations 0.01..50, relative error < 1e-12 (Student-t: 1e-11, see
below), against brute-force adaptive quadrature to ~1e-14, and for the probit and Poisson against
the QP oracle table to ~1e-13):

* probit, in g = y (f + bias) where q(g) ~ Phi(g) N(g | y (mu + bias), sigma^2): -log q is convex
  with curvature between 1/sigma^2 and 1 + 1/sigma^2, so no feature is narrower than
  sigma / sqrt(1 + sigma^2); beyond g = 8 Phi(g) is 1 and the density is the cavity's.  Panels are
  at most 4 sigma/sqrt(1+sigma^2) wide up to g = 8 and 2 sigma beyond.  The window spans the
  tilted mean +-10 tilted sds, widened on the right until the cavity mass beyond is 1e-17 Z
  (tilted mass 1e-17) and cut on the left where the Gaussian N(mu/(1+sigma^2), sigma^2/(1+sigma^2))
  that bounds the density for g < 0 has no mass left.
* Poisson, q(f) ~ f^{2y} N(f | b, v) with b = mu/(1+2 sigma^2), v = sigma^2/(1+2 sigma^2): modes at
  (b +- sqrt(b^2 + 8 y v)) / 2, each windowed +-10 sqrt(v) unless its Laplace weight is below
  e^-46 of the other's; panels at most 2 sqrt(v) wide.
* logit, in the cavity's standard units z = (g - m) / sigma, m = y (mu + bias): the density
  sigma(m + sigma z) phi(z) is log-concave (log sigma is concave, curvature sigma (1 - sigma)
  <= 1/4) with curvature between 1 and 1 + sigma^2/4, so everything beyond 10 of its mode z* lies
  50 nats below the peak (tilted mass < 1e-22, and at most that times 100 in the variance).  The
  window z* +- 10 is cut at steps of 2 (the curvature is at least 1, so no feature is narrower
  than 1) and, where sigma's transition g = 0 (z0 = -m / sigma) falls inside, at z0 +- 2^k /
  sigma, panels halving towards it down to width 1 in g: sigma's poles at g = +-i pi then lie at
  least 3 half-widths from every panel's centre (the logit predictive's rule,
  :func:`gpdsl._jit.special.logit_normal_edges`).  Measured against the 4x finer, wider rule:
  log Z 1e-15, mean (in sds) 1e-14, variance 2e-15, sigma* 4e-15, E[sigma(-g)] 2e-15.
* Student-t, in x = (f - y) / a with a = scale sqrt(df), where
  q(x) ~ (1 + x^2)^-p N(x | loc, s2), p = (df+1)/2, loc = (mu - y)/a, s2 = sigma^2 / a^2.  Its
  stationary points solve the cubic (x - loc)(1 + x^2) + 2 p s2 x = 0 and lie between 0 (y) and
  loc (the cavity): one mode, or two with an antimode between (an outlier y), found by
  bisection.  |d^2 log q| <= 2p + 1/s2 =: K everywhere, so log int q >= max log q + log
  sqrt(2 pi / K).  From each mode the window reaches out, doubling its step, to where the mass
  left beyond is provably below e^-46 of that bound (times a margin for the variance): outwards,
  where log q falls monotonically, q(x) (d + 1.25 sqrt(s2)) bounds it (d: the distance left to
  where both factors fall); towards the antimode, |mode - antimode| q(x); a mode whose whole side
  is negligible is left out, and a gap between the two windows is one panel (its mass is
  negligible, but QP's integrand phi(Phi^-1(F)) is not: F is constant there and the rule
  integrates that exactly).  Panels are at most min(2 sqrt(s2), k/(1+k) sqrt(1+x^2)) wide with
  k = min(1, 1/sqrt(2p)): the likelihood's branch points at x = +-i lie at least 1/k panel widths
  away from every panel, and its local scale sqrt(1 + x^2) / sqrt(2p) is resolved.  sigma* sums
  1 - F from the right (heavy tails).  Measured against the 4x finer, wider rule over df 0.5..1e5,
  scales 0.01..5, y - mu up to 55: log Z 3e-14, variance 8e-12, mean 4e-12 of an sd, sigma*
  3e-12, the gradient expectations 1e-13; the worst at a cavity 3,000 of its sds from y, where
  rounding x (origin y) costs that much; 1e-13 otherwise.  At most ~70 panels.
"""
import math

import numpy as np
from numba import njit, typeof, types
from numba.extending import overload

from .special import (GL_NODES, GL_WEIGHTS, MILLS_CF_MIN, bvn_cdf, digamma_half_excess, log1p_excess, log_sigmoid,
                      logit_normal_edges, logit_normal_mode, mills_cf, norm_cdf, norm_logcdf, norm_pdf, norm_ppf,
                      student_t_log_norm_excess)

PROBIT = 0
POISSON_SQUARE = 1
GAUSSIAN = 2
# LOGIT is a numpy uint8 (== 3) rather than an int: its Numba type tells a logit fit's kernels from
# a probit fit's at compile time (see site_projection), so that neither compiles the other's code.
LOGIT = np.uint8(3)
STUDENT_T = 4
_LOGIT_TYPE = typeof(LOGIT)
_LOGIT_CODE = 3             # LOGIT as a Python int, for the literal kinds of the quadrature rules

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_WINDOW = 10.0              # window half-width in (local) standard deviations
_TAIL_LOG = 39.2            # -log(1e-17): cavity tail mass left out of the probit window, over Z
_PROBIT_EDGE = 8.0          # Phi(g) == 1 in double precision for g > 8.3
_PROBIT_PANEL_INNER = 4.0   # panel width / (sigma / sqrt(1 + sigma^2)) below the edge
_PROBIT_PANEL_OUTER = 2.0   # panel width / sigma above it
_POISSON_PANEL = 2.0        # panel width / sqrt(v)
_MINOR_MODE_LOG = 46.0      # a Poisson mode lighter than e^-46 of the other is not windowed
_MAX_PANELS = 256           # per zone; reached only far outside the ranges above
_RECURRENCE_MAX_N = 4096    # raw moments E[f^n] by their recurrence up to this n, by quadrature beyond
_WINDOWED_HALF = 14.0       # quadrature window half-width in a mode's local standard deviations
_WINDOWED_PANEL = 2.0       # its panel width, in the same units
_LN2 = math.log(2.0)
_LOGIT_EXTRA_REACH = 64.0   # the logit gradient's window reaches at most this far past the tilted one (in sds)
_T_TAIL_LOG = 46.0          # -log(1e-20): tilted mass left out of the Student-t window (plus a margin)
_T_PANEL_GAUSS = 2.0        # Student-t panel width / cavity sd
_T_PANEL_CORE = 1.0         # ... / (sqrt(1 + x^2) / sqrt(df + 1)), the likelihood's local scale
_T_PANEL_POLE = 1.0         # ... / sqrt(1 + x^2), the distance to its branch points (at most)
_T_MAX_PANELS = 4096        # reached only far outside the ranges of the module docstring
# The cavity's variance over the likelihood's curvature scale^2 df / (df + 1) (_t_curvature_scale2),
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


# ----------------------------------------------------------------------------------------------
# shared quadrature



def run_overload(implementation, *args):
    """The body of an @overload stub when it runs as plain Python (``NUMBA_DISABLE_JIT=1``, or a
    Python caller): the implementation ``implementation`` returns for the arguments' Numba types,
    called on them.  Jitted callers never run it: Numba compiles the overload in its place."""
    return implementation(*[typeof(a) for a in args])(*args)


@njit(cache=True)
def _panel_count(length, width):
    """Number of equal panels of width <= width covering a length >= 0, capped at _MAX_PANELS."""
    if not length > 0.0:
        return 0
    count = math.ceil(length / width)
    if count > _MAX_PANELS:
        return _MAX_PANELS
    return max(int(count), 1)


@njit(cache=True)
def _log_density(kind, x, loc, scale2, power, log_norm):
    """Log of the normalised tilted density in the coordinates of the probit's and Poisson's
    sigma* rule (:func:`_wasserstein_sd`); the logit's and Student-t's rules use
    :func:`_edge_log_density`.

    PROBIT: log Phi(x) + log N(x | loc, scale2), the likelihood folded into g = y (f + bias).
    POISSON_SQUARE: the density of f^power N(f | b, scale2) (power = 2y, e^{-f^2} absorbed in the
    Gaussian) at f = loc + x, where loc is a mode of it: g(loc + x) - g(loc) =
    power (log|1 + x/loc| - x/loc) - x^2 / (2 scale2), since power = loc (loc - b) / scale2 at a
    mode; b drops out, and so does power log|f| (~1e13 at a count of 1e12, whose rounding alone
    would be 1e-3).  ``log_norm`` holds the normalisers, so the density integrates to 1.
    """
    if kind == PROBIT:
        u = x - loc
        return norm_logcdf(x) - 0.5 * u * u / scale2 - log_norm
    r = x / loc
    if r == -1.0:
        return -math.inf
    log_ratio = math.log1p(r) if r > -1.0 else math.log(-1.0 - r)
    return power * (log_ratio - r) - 0.5 * x * x / scale2 - log_norm


def _edge_log_density(kind, x, loc, scale2, power, log_norm):
    """Log of the normalised tilted density in the coordinates of the logit's and Student-t's
    rules (:func:`_wasserstein_sd_edges`, :func:`_moments_on_edges`); for jitted callers only
    (implemented by :func:`_edge_log_density_by_kind`).

    LOGIT: log sigma(loc + power x) - x^2 / 2 in the cavity's standard units x = (g - loc) / power
    (loc = y (mu + bias), power = the cavity sd; scale2 unused), where the Gaussian factor is exact
    and the rounding of g only enters log sigma, whose slope is below 1.
    STUDENT_T: -power log(1 + x^2) - (x - loc)^2 / (2 scale2) in x = (f - y) / a, a = scale sqrt(df)
    (power = (df + 1)/2, loc = (mu - y)/a, scale2 = cavity variance / a^2).
    ``log_norm`` holds the normalisers, so the density integrates to 1.

    The rules take the kind as a *literal* constant (a Python int in the call, so that Numba types
    it Literal[int] and compiles the rule once per kind) and the overload picks that kind's density
    at compile time: a logit fit compiles the logit density alone, a Student-t fit the Student-t's.
    (The probit's and Poisson's rule keeps its own _log_density with a run-time kind, shared by the
    two, which keeps a probit fit's QP kernel what it was before these kinds.)
    """
    return run_overload(_edge_log_density_by_kind, kind, x, loc, scale2, power, log_norm)


@njit(cache=True)
def _logit_log_density(x, loc, scale2, power, log_norm):
    return log_sigmoid(loc + power * x) - 0.5 * x * x - log_norm


@njit(cache=True)
def _student_t_log_density(x, loc, scale2, power, log_norm):
    u = x - loc
    return -power * math.log1p(x * x) - 0.5 * u * u / scale2 - log_norm


@njit(cache=True)
def _any_edge_log_density(kind, x, loc, scale2, power, log_norm):
    if kind == _LOGIT_CODE:
        return _logit_log_density(x, loc, scale2, power, log_norm)
    return _student_t_log_density(x, loc, scale2, power, log_norm)


@overload(_edge_log_density, prefer_literal=True)
def _edge_log_density_by_kind(kind, x, loc, scale2, power, log_norm):
    if isinstance(kind, types.IntegerLiteral):
        density = _logit_log_density if kind.literal_value == _LOGIT_CODE else _student_t_log_density
        return lambda kind, x, loc, scale2, power, log_norm: density(x, loc, scale2, power, log_norm)
    return lambda kind, x, loc, scale2, power, log_norm: _any_edge_log_density(kind, x, loc, scale2, power,
                                                                               log_norm)


def _extra_terms(kind, x, loc, power):
    """The integrands (e1, e2) of _moments_on_edges's extra expectations at x; for jitted callers
    only (chosen by the literal kind like _log_density)."""
    return run_overload(_extra_terms_by_kind, kind, x, loc, power)


@njit(cache=True)
def _logit_extra_terms(x, loc, power):
    return math.exp(log_sigmoid(-(loc + power * x))), 0.0


@njit(cache=True)
def _student_t_extra_terms(x, loc, power):
    x2 = x * x
    return log1p_excess(x2), x2 / (1.0 + x2)


@njit(cache=True)
def _any_extra_terms(kind, x, loc, power):
    if kind == _LOGIT_CODE:
        return _logit_extra_terms(x, loc, power)
    return _student_t_extra_terms(x, loc, power)


@overload(_extra_terms, prefer_literal=True)
def _extra_terms_by_kind(kind, x, loc, power):
    if isinstance(kind, types.IntegerLiteral):
        terms = _logit_extra_terms if kind.literal_value == _LOGIT_CODE else _student_t_extra_terms
        return lambda kind, x, loc, power: terms(x, loc, power)
    return lambda kind, x, loc, power: _any_extra_terms(kind, x, loc, power)


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


@njit(cache=True)
def _wasserstein_sd(kind, loc, scale2, power, log_norm, lo, mid, hi, width_lo, width_hi):
    """sigma* = int phi(Phi^-1(F(x))) dx of eq. (7) on [lo, hi] by composite 20-point GL (the
    probit's and Poisson's rule; :func:`_wasserstein_sd_edges` is the logit's and Student-t's).

    Panels are at most ``width_lo`` wide on [lo, mid] and ``width_hi`` on [mid, hi].  (Kept apart
    from _wasserstein_sd_edges, whose panel array and two-sided tail sums compile for 0.15 s more
    in every probit QP kernel; the light tails here need no right-hand sums.)  F at each
    node is the running integral of the density (panel integrals plus the within-panel
    cumulative rule), normalised by the total so that F runs from 0 to 1 across the window;
    phi(Phi^-1(F)) = phi(Phi^-1(1 - F)), and the smaller of F and 1 - F keeps its accuracy in
    both tails.  Nodes where that tail probability is <= 0 contribute 0 (the limit at F = 0, 1).
    """
    n_lo = _panel_count(mid - lo, width_lo)
    n_hi = _panel_count(hi - mid, width_hi)
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
            q[j] = math.exp(_log_density(kind, a + half * (GL_NODES[j] + 1.0), loc, scale2, power,
                                         log_norm))
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


@njit(cache=True)
def _wasserstein_sd_edges(kind, loc, scale2, power, log_norm, edges, count):
    """sigma* = int phi(Phi^-1(F(x))) dx of eq. (7) by composite 20-point GL on the panels
    [edges[p], edges[p + 1]], p < count - 1, which cover the support (up to a negligible mass).

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
            q[j] = math.exp(_edge_log_density(kind, a + half * (GL_NODES[j] + 1.0), loc, scale2,
                                              power, log_norm))
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


@njit(cache=True)
def _moments_on_edges(kind, loc, scale2, power, edges, count, extra):
    """(log mass, mean, variance, e1, e2) of h(x) = exp(_edge_log_density(kind, x, loc, scale2, power, 0))
    by composite 20-point GL on the panels [edges[p], edges[p + 1]], p < count - 1.

    Each panel's mass, mean and central second moment are summed about the panel's centre with
    its largest log h subtracted, and the panels are combined at the end (the overall mean, then
    variance = sum_p w_p (M2_p + (m_p - mean)^2) / sum_p w_p): no sum cancels more than within
    one panel, whatever the distance between the tilted mean and the coordinates' origin, and
    no h under- or overflows (log Z of -1e4 is fine).  With ``extra``, e1 and e2 are tilted
    expectations for the likelihood-parameter gradients (all terms non-negative): LOGIT
    e1 = E[sigma(-g)]; STUDENT_T e1 = E[log(1 + x^2) - x^2 / (1 + x^2)] (formed without cancellation at
    small x, as the df gradient at large df needs), e2 = E[x^2 / (1 + x^2)].
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
            lv[j] = _edge_log_density(kind, centre + half * GL_NODES[j], loc, scale2, power, 0.0)
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
                t1, t2 = _extra_terms(kind, centre + d, loc, power)
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


# ----------------------------------------------------------------------------------------------
# probit


@njit(cache=True)
def _probit_ratio(z):
    """(r, delta) with r = phi(z) / Phi(z) and delta = 1 - r (z + r) in (0, 1].

    For z < -5 both come from the continued fraction (``mills_cf``): r = D1 and
    delta = (2/D3 - 1/D2) / D2, free of the cancellation in z + r ~ -1/z.
    """
    if z >= -MILLS_CF_MIN:
        r = norm_pdf(z) / norm_cdf(z)
        return r, 1.0 - r * (z + r)
    d1, d2, d3 = mills_cf(-z)
    return d1, (2.0 / d3 - 1.0 / d2) / d2


@njit(cache=True)
def probit_tilted_moments(y, mu, var, bias):
    """(log Z, mean, variance) of Phi(y (f + bias)) N(f | mu, var) / Z, y = +-1.

    Rasmussen & Williams eq. (3.58) with z = y (mu + bias) / sqrt(1 + var), r = N(z)/Phi(z):
    mean = mu + y var r / sqrt(1 + var) and variance = var - var^2 r (z + r) / (1 + var), written
    as var (1 + var delta) / (1 + var) with delta = 1 - r (z + r) so that nothing cancels.
    """
    c = math.sqrt(1.0 + var)
    z = y * (mu + bias) / c
    r, delta = _probit_ratio(z)
    return norm_logcdf(z), mu + y * var * r / c, var * (1.0 + var * delta) / (1.0 + var)


@njit(cache=True)
def probit_tilted_cdf(t, y, mu, sd, bias):
    """CDF at t of the probit tilted distribution (paper appendix C.1, eqs. 45-49).

    With h = (t - mu)/sd, z = y (mu + bias)/sqrt(1 + sd^2) and rho = -y sd / sqrt(1 + sd^2),
    F(t) = Phi2(h, z; rho) / Phi(z), the bivariate normal CDF written with Owen's T
    (``bvn_cdf``; its h = 0, z = 0 and h = z = 0 branches are the paper's special cases 47-49,
    with case 49 equal to 1/2 - y arctan(sd) / pi).  The absolute error is ~1e-16 / Phi(z), so
    the result is meaningless once Phi(z) is below ~1e-8 and nan once it underflows.
    """
    c = math.sqrt(1.0 + sd * sd)
    z = y * (mu + bias) / c
    den = norm_cdf(z)
    if not den > 0.0:
        return math.nan
    value = bvn_cdf((t - mu) / sd, z, -y * sd / c) / den
    return min(max(value, 0.0), 1.0)


@njit(cache=True)
def _probit_qp_sd(y, mu, sd, bias, log_z, mean, var_t):
    """sigma* of the probit tilted distribution given its closed-form log Z, mean and variance."""
    loc = y * (mu + bias)                     # cavity mean in g = y (f + bias)
    mean_g = y * (mean + bias)
    s_t = math.sqrt(var_t)
    c2 = 1.0 + sd * sd
    s_in = sd / math.sqrt(c2)                 # narrowest feature of the density
    lo = max(mean_g - _WINDOW * s_t, loc / c2 - _WINDOW * s_in)
    hi = max(mean_g + _WINDOW * s_t, loc + sd * math.sqrt(2.0 * (_TAIL_LOG - log_z)))
    if not (math.isfinite(lo) and math.isfinite(hi) and sd > 0.0):
        return math.nan
    mid = min(max(_PROBIT_EDGE, lo), hi)
    log_norm = log_z + math.log(sd) + _HALF_LOG_2PI
    # int(): a run-time value, so that the probit and Poisson rules share one compiled
    # _wasserstein_sd (Numba compiles a callee once per value of a constant argument).
    return _wasserstein_sd(int(PROBIT), loc, sd * sd, 0.0, log_norm, lo, mid, hi,
                           _PROBIT_PANEL_INNER * s_in, _PROBIT_PANEL_OUTER * sd)


@njit(cache=True)
def probit_qp_sd(y, mu, sd, bias):
    """QP standard deviation sigma* (eq. 7) of Phi(y (f + bias)) N(f | mu, sd^2) / Z."""
    log_z, mean, var_t = probit_tilted_moments(y, mu, sd * sd, bias)
    return _probit_qp_sd(y, mu, sd, bias, log_z, mean, var_t)


# inline="always" (Numba inlines the body into its callers): a thin wrapper, which compiled on its
# own would have LLVM optimise and emit the QP quadrature beneath it once more.
@njit(cache=True, inline="always")
def probit_project(y, mu, var, bias, qp):
    """(log Z, mean, variance) of the probit tilted distribution with cavity N(mu, var): EP's
    moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    log_z, mean, var_t = probit_tilted_moments(y, mu, var, bias)
    if qp:
        sd = _probit_qp_sd(y, mu, math.sqrt(var), bias, log_z, mean, var_t)
        var_t = sd * sd
    return log_z, mean, var_t


# ----------------------------------------------------------------------------------------------
# Poisson with square link


@njit(cache=True)
def _gauss_raw_moments(n, b, v):
    """(log M_n, M_{n-1}/M_n) for M_k = E[f^k], f ~ N(b, v), b >= 0, n >= 0.

    M_k = b M_{k-1} + (k-1) v M_{k-2} has only non-negative terms for b >= 0; the running
    values are rescaled by 2^+-500 to stay in range.  The ratio is 0 where undefined.  Its
    cost grows with n: see :func:`_power_gaussian_moments`.
    """
    # An odd moment is ~ b times the even ones; for b ~ 1e-320 (a cavity mean that rounding has
    # left at a denormal) that ratio is beyond what the common rescaling below can hold, and the
    # even moments overflowed.  Below 1e-100 sqrt(v), b changes no moment at double precision.
    if b < 1e-100 * math.sqrt(v):
        b = 0.0
    m2, m1, m0 = 0.0, 0.0, 1.0                # M_{k-2}, M_{k-1}, M_k at k = 0
    log_scale = 0.0
    for k in range(1, n + 1):
        m2, m1 = m1, m0
        m0 = b * m1 + (k - 1) * v * m2
        if m0 > 1e150:
            m2 *= 2.0 ** -500
            m1 *= 2.0 ** -500
            m0 *= 2.0 ** -500
            log_scale += 500.0 * math.log(2.0)
        elif 0.0 < m0 < 1e-150:
            m2 *= 2.0 ** 500
            m1 *= 2.0 ** 500
            m0 *= 2.0 ** 500
            log_scale -= 500.0 * math.log(2.0)
    return math.log(m0) + log_scale, m1 / m0


@njit(cache=True)
def _power_gaussian_moments(n, b, v):
    """(log M_n, mean, variance, log mass) of the density f^n N(f | b, v) / M_n, M_n = E[f^n]
    under N(b, v), for b >= 0 and even n >= 0 (n = 2y for a count y); the log mass is
    log int e^(g(f) - g(f_+)) df about the positive mode f_+ (the QP rule's normaliser, free of
    the ~n log f_+ that log M_n carries).

    Up to _RECURRENCE_MAX_N by the raw-moment recurrence and Stein's identity (mean = b + n v r1,
    variance = v (n + 1 - n r1 mean), r1 = M_{n-1}/M_n), whose cost grows with n and whose
    variance cancels ~n eps; beyond, at a cost independent of n, by quadrature: the log density
    g(f) = n log|f| - (f - b)^2 / (2v) has a mode at each root of f^2 - b f - n v = 0 with
    curvature kappa = n / f^2 + 1/v, and for n > 4096 each mode's window of
    +-_WINDOWED_HALF / sqrt(kappa) lies within 0.22 |f| of it (the other mode and f = 0 are far
    outside), so composite 20-point Gauss-Legendre panels over the two windows integrate
    e^(g - g(mode)) to rounding; the moments are accumulated about the heavier mode, which keeps
    the variance free of cancellation.
    """
    root = math.sqrt(b * b + 4.0 * n * v)
    centre = 0.5 * (b + root)                 # b >= 0: the positive mode is the heavier one
    if n <= _RECURRENCE_MAX_N:
        log_m, r1 = _gauss_raw_moments(n, b, v)
        if n == 0:
            return log_m, b, v, 0.5 * math.log(v) + _HALF_LOG_2PI
        mean = b + n * v * r1
        log_mass = log_m + 0.5 * math.log(v) + _HALF_LOG_2PI - n * math.log(centre) + 0.5 * (centre - b) ** 2 / v
        return log_m, mean, v * (n + 1.0 - n * r1 * mean), log_mass
    s0 = s1 = s2 = 0.0
    nq = GL_NODES.shape[0]
    for mode, log_rel in ((centre, 0.0),
                          (0.5 * (b - root), n * math.log1p(-2.0 * b / (root + b)) - 0.5 * root * b / v)):
        # log_rel = g(mode) - g(centre); g(mode + d) - g(mode) = n (log1p(d/mode) - d/mode) - d^2/(2v)
        # (n = mode (mode - b) / v at a mode), which keeps the exponent's rounding to ~1e-9 at
        # n = 2e12, where n log|f| alone is ~1e13.
        if log_rel < -_MINOR_MODE_LOG:
            continue
        width = 1.0 / math.sqrt(n / (mode * mode) + 1.0 / v)
        half = 0.5 * _WINDOWED_PANEL * width
        for p in range(int(round(2.0 * _WINDOWED_HALF / _WINDOWED_PANEL))):
            for j in range(nq):
                d = (2.0 * p - _WINDOWED_HALF / (0.5 * _WINDOWED_PANEL)) * half + half * (GL_NODES[j] + 1.0)
                x = d / mode
                w = half * GL_WEIGHTS[j] * math.exp(log_rel + n * (math.log1p(x) - x) - 0.5 * d * d / v)
                offset = (mode - centre) + d  # f - centre
                s0 += w
                s1 += w * offset
                s2 += w * offset * offset
    log_ref = n * math.log(centre) - 0.5 * (centre - b) ** 2 / v
    shift = s1 / s0
    return (log_ref + math.log(s0) - 0.5 * math.log(v) - _HALF_LOG_2PI, centre + shift, s2 / s0 - shift * shift,
            math.log(s0))


@njit(cache=True)
def _poisson_square_gaussian(mu, var):
    """(b, v) with exp(-f^2) N(f | mu, var) proportional to N(f | b, v)."""
    c = 1.0 + 2.0 * var
    return mu / c, var / c


@njit(cache=True)
def poisson_square_tilted_moments(y, mu, var):
    """(log Z, mean, variance) of f^{2y} e^{-f^2} / y! N(f | mu, var) / Z, y = 0, 1, 2, ...

    exp(-f^2) N(f | mu, var) = N(mu | 0, 1/2 + var) sqrt(pi) N(f | b, v) (paper eq. 52), so
    Z = M_{2y} N(mu | 0, 1/2 + var) sqrt(pi) / y! with M_k the raw moments of N(b, v) -- the
    hypergeometric forms of eqs. 53-60.  With r1 = M_{2y-1}/M_{2y}, Stein's identity gives
    mean = b + 2y v r1 and variance = v (2y + 1 - 2y r1 mean) (computed for |b|; mirrored);
    for counts above 2,048 by quadrature instead (:func:`_power_gaussian_moments`).
    """
    ny = int(y + 0.5)
    b, v = _poisson_square_gaussian(mu, var)
    log_m, mean_abs, var_t, _ = _power_gaussian_moments(2 * ny, abs(b), v)
    log_z = log_m - math.lgamma(ny + 1.0) - 0.5 * math.log1p(2.0 * var) - mu * mu / (1.0 + 2.0 * var)
    return log_z, math.copysign(mean_abs, b), var_t


@njit(cache=True)
def _poisson_square_cdf_nonneg(t, n, b, v):
    """CDF at t of f^n N(f | b, v) / M_n for b >= 0 and even n >= 2 (exact finite sums).

    Everything is scaled to max(|t|, b, sqrt v) = 1 first (the CDF is scale free).  With
    s = (t - b)/sqrt(v) and the Gaussian partial moments K_k(s) = int_s^inf x^k phi(x) dx
    (K_k = (k-1) K_{k-2} + s^{k-1} phi(s)) and E_k(s) = int_s^inf (x - s)^k phi(x) dx
    (E_k = (k-1) E_{k-2} - s E_{k-1}):
    * t >= b: 1 - F = sum_k C(n,k) b^{n-k} v^{k/2} K_k(s) / M_n (the paper's binomial sum
      around b, eq. 66), all terms >= 0;
    * 0 <= t < b: 1 - F = sum_k C(n,k) t^{n-k} v^{k/2} E_k(s) / M_n (binomial sum around t), all
      terms >= 0;
    * t < 0: F = sum_k C(n,k) (-b)^{n-k} v^{k/2} K_k(s') / M_n, s' = (b - t)/sqrt(v), the mirror
      image; the terms alternate, with absolute error up to ~eps ((2b - t)/(-t))^n F.
    """
    scale = max(abs(t), b, math.sqrt(v))
    t = t / scale
    b = b / scale
    v = v / (scale * scale)
    sv = math.sqrt(v)
    log_m, _ = _gauss_raw_moments(n, b, v)
    if t >= b:
        s, base, upper, around_t = (t - b) / sv, b, True, False
    elif t >= 0.0:
        s, base, upper, around_t = (t - b) / sv, t, True, True
    else:
        s, base, upper, around_t = (b - t) / sv, -b, False, False
    pdf = norm_pdf(s)
    g2 = norm_cdf(-s)                          # order k - 2
    if around_t:
        g1 = pdf - s * g2                      # E_1
    else:
        g1 = pdf                               # K_1
    total = g2 * base ** n                     # k = 0
    binom = 1.0
    for k in range(1, n + 1):
        if k >= 2:
            if around_t:
                gk = (k - 1) * g2 - s * g1
            else:
                gk = (k - 1) * g2 + s ** (k - 1) * pdf
            g2, g1 = g1, gk
        binom = binom * (n - k + 1) / k
        total += binom * base ** (n - k) * sv ** k * g1
    tail = total / math.exp(log_m)
    if upper:
        tail = 1.0 - tail
    return min(max(tail, 0.0), 1.0)


@njit(cache=True)
def poisson_square_tilted_cdf(t, y, mu, sd):
    """CDF at t of the Poisson square-link tilted distribution (paper appendix C.2).

    Exact finite sums of Gaussian partial moments, equivalent to the incomplete-gamma sum of
    eq. 66 (see ``_poisson_square_cdf_nonneg``); b < 0 is mirrored to b > 0.  Absolute error
    ~1e-15 for y up to ~100 (larger y overflows the sums).
    """
    ny = int(y + 0.5)
    b, v = _poisson_square_gaussian(mu, sd * sd)
    if ny == 0:
        return norm_cdf((t - b) / math.sqrt(v))
    if b < 0.0:
        return 1.0 - _poisson_square_cdf_nonneg(-t, 2 * ny, -b, v)
    return _poisson_square_cdf_nonneg(t, 2 * ny, b, v)


@njit(cache=True)
def _mode_log_weight(f, n, b, v):
    """Laplace estimate of the log mass of f^n N(f | b, v) around a mode f (unnormalised)."""
    if f == 0.0:                              # f^n vanishes there (and n / f^2 would divide by 0)
        return -math.inf
    return n * math.log(abs(f)) - 0.5 * (f - b) ** 2 / v - 0.5 * math.log(n / (f * f) + 1.0 / v)


@njit(cache=True)
def _poisson_square_qp_sd(ny, mu, sd, var_t):
    """sigma* of the Poisson square-link tilted distribution (y >= 1 needs the rule)."""
    if ny == 0:
        return math.sqrt(var_t)               # the tilted distribution is Gaussian
    # sigma* is unchanged by the mirror f -> -f, so b >= 0 (the positive mode the heavier one).
    b, v = _poisson_square_gaussian(abs(mu), sd * sd)
    n = 2 * ny
    sv = math.sqrt(v)
    root = math.sqrt(b * b + 4.0 * n * v)     # modes solve f^2 - b f - n v = 0
    f_hi = 0.5 * (b + root)
    # The product of the roots is -n v: b - root would cancel to 0 when b^2 >> n v.
    f_lo = -n * v / f_hi
    if not (math.isfinite(f_hi) and math.isfinite(f_lo) and v > 0.0):
        return math.nan
    lo = f_lo if _mode_log_weight(f_lo, n, b, v) >= _mode_log_weight(f_hi, n, b, v) - _MINOR_MODE_LOG else f_hi
    _, _, _, log_mass = _power_gaussian_moments(n, b, v)
    # int(): see _probit_qp_sd.  Coordinates relative to the mode f_hi (see _log_density).
    return _wasserstein_sd(int(POISSON_SQUARE), f_hi, v, float(n), log_mass, lo - f_hi - _WINDOW * sv,
                           _WINDOW * sv, _WINDOW * sv, _POISSON_PANEL * sv, 1.0)


@njit(cache=True)
def poisson_square_qp_sd(y, mu, sd):
    """QP standard deviation sigma* (eq. 7) of the Poisson square-link tilted distribution."""
    ny = int(y + 0.5)
    _, _, var_t = poisson_square_tilted_moments(y, mu, sd * sd)
    return _poisson_square_qp_sd(ny, mu, sd, var_t)


@njit(cache=True, inline="always")     # as probit_project
def poisson_square_project(y, mu, var, qp):
    """(log Z, mean, variance) of the Poisson square-link tilted distribution with cavity
    N(mu, var): EP's moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    log_z, mean, var_t = poisson_square_tilted_moments(y, mu, var)
    ny = int(y + 0.5)
    if qp and ny > 0:                         # y = 0: the tilted distribution is Gaussian
        sd = _poisson_square_qp_sd(ny, mu, math.sqrt(var), var_t)
        var_t = sd * sd
    return log_z, mean, var_t


# ----------------------------------------------------------------------------------------------
# logit


@njit(cache=True)
def _logit_slope_mode(m, s):
    """The mode in z of sigma'(m + s z) phi(z): the root of s (1 - 2 sigma(m + s z)) = z,
    decreasing in z and bracketed by [-s, s]; by bisection."""
    lo, hi = -s, s
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not (lo < mid < hi):
            break
        if s * (1.0 - 2.0 * math.exp(log_sigmoid(m + s * mid))) > mid:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@njit(cache=True)
def _logit_rule(y, mu, var, bias, extra):
    """(log Z, mean, variance, E[sigma(-g)], edges, count, m, s, log mass) of
    sigma(y (f + bias)) N(f | mu, var) / Z, y = +-1, in g = y (f + bias) = m + s z with
    m = y (mu + bias), s = sqrt(var): the density in z, sigma(m + s z) phi(z), is log-concave with
    curvature between 1 and 1 + s^2/4, integrated on the panels of
    :func:`gpdsl._jit.special.logit_normal_edges` (the logit predictive's rule) over z* +- 10
    (z* its mode), which leave out a mass below e^-50 of the peak's.  With ``extra`` the fourth
    value is E_tilted[sigma(-g)] (else nan), on a window widened to cover its integrand too.
    The cavity must be finite with var > 0."""
    m = y * (mu + bias)
    s = math.sqrt(var)
    z_star, _ = logit_normal_mode(m, s)
    lo, hi = z_star - _WINDOW, z_star + _WINDOW
    if extra:
        # E[sigma(-g)]'s integrand sigma'(g) phi(z) is log-concave with curvature >= 1 too, about
        # its own mode (sigma(-g) ~ e^-m puts it up to ~sqrt(m) below z*): the window covers both
        z_e = _logit_slope_mode(m, s)
        z_e = min(max(z_e, z_star - _LOGIT_EXTRA_REACH), z_star + _LOGIT_EXTRA_REACH)
        lo, hi = min(lo, z_e - _WINDOW), max(hi, z_e + _WINDOW)
    edges, count = logit_normal_edges(m, s, lo, hi)
    # a literal kind: the rule compiled for the logit density alone (see _edge_log_density)
    log_mass, mean_z, var_z, e1, _ = _moments_on_edges(_LOGIT_CODE, m, 1.0, s, edges, count, extra)
    return log_mass - _HALF_LOG_2PI, mu + y * s * mean_z, var * var_z, e1, edges, count, m, s, log_mass


@njit(cache=True)
def _logit_degenerate(y, mu, var, bias):
    """The logit site's (log Z, mean, variance, E[sigma(-g)]) where the rule does not apply: a
    cavity of variance 0 (a point mass), else nan (not finite, or negative)."""
    m = y * (mu + bias)
    if var == 0.0 and math.isfinite(m):
        return log_sigmoid(m), mu, 0.0, math.exp(log_sigmoid(-m))
    return math.nan, math.nan, math.nan, math.nan


@njit(cache=True)
def _logit_ok(y, mu, var, bias):
    return var > 0.0 and math.isfinite(var) and math.isfinite(y * (mu + bias))


@njit(cache=True)
def logit_tilted_moments(y, mu, var, bias):
    """(log Z, mean, variance) of sigma(y (f + bias)) N(f | mu, var) / Z, y = +-1, by quadrature
    (:func:`_logit_rule`); nan for a cavity that is not finite."""
    if not _logit_ok(y, mu, var, bias):
        log_z, mean, var_t, _ = _logit_degenerate(y, mu, var, bias)
        return log_z, mean, var_t
    log_z, mean, var_t, _, _, _, _, _, _ = _logit_rule(y, mu, var, bias, bool(False))
    return log_z, mean, var_t


@njit(cache=True)
def _logit_qp(y, mu, var, bias):
    """(log Z, mean, sigma*^2) of the logit tilted distribution (QP): sigma* on the panels of the
    moments (:func:`_wasserstein_sd_edges`, in z, times s)."""
    if not _logit_ok(y, mu, var, bias):
        log_z, mean, var_t, _ = _logit_degenerate(y, mu, var, bias)
        return log_z, mean, var_t
    log_z, mean, _, _, edges, count, m, s, log_mass = _logit_rule(y, mu, var, bias, bool(False))
    sd = s * _wasserstein_sd_edges(_LOGIT_CODE, m, 1.0, s, log_mass, edges, count)
    return log_z, mean, sd * sd


@njit(cache=True)
def logit_qp_sd(y, mu, sd, bias):
    """QP standard deviation sigma* (eq. 7) of sigma(y (f + bias)) N(f | mu, sd^2) / Z."""
    return math.sqrt(_logit_qp(y, mu, sd * sd, bias)[2])


@njit(cache=True, inline="always")     # as probit_project
def logit_project(y, mu, var, bias, qp):
    """(log Z, mean, variance) of the logit tilted distribution with cavity N(mu, var): EP's
    moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    if qp:
        return _logit_qp(y, mu, var, bias)
    return logit_tilted_moments(y, mu, var, bias)


# ----------------------------------------------------------------------------------------------
# Student-t


@njit(cache=True)
def _student_t_walk(lo, hi, step, cap, edges, count):
    """Panels from lo to hi after the edges[:count] already there (edges[count - 1] == lo), each
    [x, x + w] with w = min(cap, step sqrt(1 + x^2)); written to ``edges`` unless it is empty;
    returns the new count.  With ``step`` = k / (1 + k), since sqrt(1 + x^2) (the distance to
    the likelihood's branch points +-i) is 1-Lipschitz, every panel lies at least 1/k of its
    width from them, wherever it is."""
    fill = edges.shape[0] > 0
    x = lo
    while x < hi:
        b = x + min(cap, step * math.sqrt(1.0 + x * x))
        if not (b > x) or b > hi or count >= _T_MAX_PANELS:
            b = hi
        if fill:
            edges[count] = b
        count += 1
        x = b
    return count


@njit(cache=True)
def _student_t_edges(lo, gap_lo, gap_hi, hi, step, cap, edges):
    """The panels of [lo, gap_lo] and [gap_hi, hi] (:func:`_student_t_walk`) with the gap between
    as one panel; their edges written to ``edges`` unless it is empty; returns their number."""
    if edges.shape[0] > 0:
        edges[0] = lo
    count = _student_t_walk(lo, gap_lo, step, cap, edges, 1)
    if gap_hi > gap_lo:
        if edges.shape[0] > 0:
            edges[count] = gap_hi
        count += 1
    return _student_t_walk(gap_hi, hi, step, cap, edges, count)


@njit(cache=True)
def _student_t_log_q(x, loc, s2, power):
    u = x - loc
    return -power * math.log1p(x * x) - 0.5 * u * u / s2


@njit(cache=True)
def _student_t_cubic(x, loc, k):
    """(x - loc)(1 + x^2) + k x, k = 2 power s2: its roots are the stationary points of log q."""
    return (x - loc) * (1.0 + x * x) + k * x


@njit(cache=True)
def _student_t_root(lo, hi, loc, k):
    """The root of _student_t_cubic in [lo, hi] (a sign change) by bisection."""
    f_lo = _student_t_cubic(lo, loc, k)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not (lo < mid < hi):
            break
        f_mid = _student_t_cubic(mid, loc, k)
        if (f_mid < 0.0) == (f_lo < 0.0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@njit(cache=True)
def _student_t_modes(loc, s2, power):
    """(x1, x2, antimode): the maxima of log q(x) = -power log(1 + x^2) - (x - loc)^2 / (2 s2),
    the likelihood's side first (x2 = x1 and antimode = nan when there is one).  The stationary
    points solve the cubic (x - loc)(1 + x^2) + 2 power s2 x = 0, whose roots all lie between 0
    and loc; it has three when its local maximum and minimum (the roots of its derivative
    3x^2 - 2 loc x + 1 + 2 power s2) straddle 0, else one."""
    if loc == 0.0:
        return 0.0, 0.0, math.nan
    sign = 1.0 if loc > 0.0 else -1.0
    big = abs(loc)                              # mirrored to loc > 0: the roots in (0, big)
    k = 2.0 * power * s2
    disc = big * big - 3.0 * (1.0 + k)
    if disc > 0.0:
        r = math.sqrt(disc)
        c1 = (big - r) / 3.0                    # the cubic's local maximum, then minimum
        c2 = (big + r) / 3.0
        f1 = _student_t_cubic(c1, big, k)
        f2 = _student_t_cubic(c2, big, k)
        if f1 >= 0.0 and f2 <= 0.0:
            x1 = _student_t_root(0.0, c1, big, k)
            x2 = _student_t_root(c2, big, big, k)
            return sign * x1, sign * x2, sign * _student_t_root(c1, c2, big, k)
        x = _student_t_root(0.0, c1, big, k) if f2 > 0.0 else _student_t_root(c2, big, big, k)
        return sign * x, sign * x, math.nan
    x = _student_t_root(0.0, big, big, k)
    return sign * x, sign * x, math.nan


@njit(cache=True)
def _student_t_reach(x0, direction, stop, loc, s2, power, level, sx):
    """The first x = x0 + direction sd 2^j (j = 0, 1, ...; sd = the narrowest scale) where the
    mass that it leaves out is below e^level.  Towards an antimode ``stop`` (finite): that bound
    is |x0 - stop| q(x) (log q falls to the antimode and rises after it, so a gap's density is at
    most that at its ends), and ``stop`` itself if it is reached first.  Outwards (``stop`` nan,
    log q falls from x0 on): q(x) (d + sx sqrt(pi/2)) with d the distance from x to the last of
    0 and loc on that side, beyond which the likelihood and the cavity both fall."""
    sd = 1.0 / math.sqrt(2.0 * power + 1.0 / s2)
    inner = not math.isnan(stop)
    x = x0
    for j in range(1000):                       # 2^1000 sds: never reached for finite parameters
        step = x0 + direction * sd * 2.0 ** j
        if not math.isfinite(step):
            break
        x = step
        if inner:
            if (x - stop) * direction >= 0.0:
                return stop
            if _student_t_log_q(x, loc, s2, power) + math.log(abs(x0 - stop)) < level:
                return x
        else:
            beyond = max(0.0, max(0.0, loc * direction) - x * direction)
            if _student_t_log_q(x, loc, s2, power) + math.log(beyond + 1.2533141373155003 * sx) < level:
                return x
    return x


@njit(cache=True)
def _student_t_rule(y, mu, var, df, scale):
    """(edges, count, loc, scale2, power, a) of the Student-t tilted rule in x = (f - y) / a,
    a = scale sqrt(df), where the density is q(x) = (1 + x^2)^-power N(x | loc, scale2) up to a
    constant (see the module docstring for the windows and the panels)."""
    a = scale * math.sqrt(df)
    loc = (mu - y) / a
    s2 = var / (a * a)
    sx = math.sqrt(s2)
    power = 0.5 * (df + 1.0)
    curv = 2.0 * power + 1.0 / s2               # bounds |d^2 log q / dx^2|
    x1, x2, anti = _student_t_modes(loc, s2, power)
    l1, l2 = _student_t_log_q(x1, loc, s2, power), _student_t_log_q(x2, loc, s2, power)
    # log int q >= max log q + log sqrt(2 pi / curv) (log q >= its maximum - curv (x - mode)^2 / 2)
    low = max(l1, l2) + 0.5 * math.log(2.0 * math.pi / curv)
    level = low - _T_TAIL_LOG - 2.0 * math.log1p((abs(loc) + 10.0 * sx) * math.sqrt(curv))
    direction = 1.0 if loc >= 0.0 else -1.0     # from the likelihood's mode x1 towards the cavity's x2
    keep1, keep2 = True, True
    if not math.isnan(anti):
        # a mode whose whole side (antimode to infinity) is negligible is left out
        side2 = abs(x2 - anti) + abs(x2) + abs(loc) + 1.2533141373155003 * sx
        side1 = abs(x1 - anti) + abs(x1) + abs(loc) + 1.2533141373155003 * sx
        keep2 = l2 + math.log(side2) >= level
        keep1 = l1 + math.log(side1) >= level
    if math.isnan(anti) or not (keep1 and keep2):
        mode = x1 if keep1 else x2
        bounds = (_student_t_reach(mode, -direction, math.nan, loc, s2, power, level, sx),
                  _student_t_reach(mode, direction, math.nan, loc, s2, power, level, sx))
        lo, hi = min(bounds), max(bounds)
        gap_lo = gap_hi = hi
    else:
        out1 = _student_t_reach(x1, -direction, math.nan, loc, s2, power, level, sx)
        in1 = _student_t_reach(x1, direction, anti, loc, s2, power, level, sx)
        in2 = _student_t_reach(x2, -direction, anti, loc, s2, power, level, sx)
        out2 = _student_t_reach(x2, direction, math.nan, loc, s2, power, level, sx)
        lo, hi = min(out1, out2), max(out1, out2)
        gap_lo, gap_hi = min(in1, in2), max(in1, in2)
    k = min(_T_PANEL_POLE, _T_PANEL_CORE / math.sqrt(2.0 * power))
    step = k / (1.0 + k)
    cap = _T_PANEL_GAUSS * sx
    count = _student_t_edges(lo, gap_lo, gap_hi, hi, step, cap, np.empty(0))
    edges = np.empty(count)
    _student_t_edges(lo, gap_lo, gap_hi, hi, step, cap, edges)
    return edges, count, loc, s2, power, a


@njit(cache=True)
def _student_t_log_norm(df, scale):
    """log of Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale), the Student-t density at 0, without
    the lgammas' cancellation at large df (:func:`gpdsl._jit.special.student_t_log_norm_excess`)."""
    return student_t_log_norm_excess(df) - 0.5 * math.log(2.0 * math.pi) - math.log(scale)


@njit(cache=True, inline="always")
def _t_curvature_scale2(df, scale):
    """scale^2 df / (df + 1): the squared scale on which log p(y | f) turns at its mode (the inverse
    of its curvature there), the narrowest it turns anywhere; scale^2 for large df."""
    return scale * scale * (df / (df + 1.0))


@njit(cache=True)
def _student_t_ok(y, mu, var, df, scale):
    """Whether the rule applies: finite positive parameters, the cavity's variance at least
    _T_S2_POINT times the likelihood's curvature scale^2 and var / (scale^2 df) at most _T_S2_MAX."""
    if not (math.isfinite(y) and math.isfinite(mu) and var > 0.0 and math.isfinite(var) and df > 0.0
            and math.isfinite(df) and scale > 0.0 and math.isfinite(scale)):
        return False
    a2 = df * scale * scale
    return a2 > 0.0 and var >= _T_S2_POINT * _t_curvature_scale2(df, scale) and var / a2 <= _T_S2_MAX



@njit(cache=True)
def _student_t_degenerate(y, mu, var, df, scale):
    """The Student-t site's (log Z, mean, variance, E[log(1 + u) - u / (1 + u)], E[u / (1 + u)]) where
    the rule does not apply: a cavity of variance 0, or one so narrow on the likelihood's scale
    (var < _T_S2_POINT scale^2 df / (df + 1)) that the moments are their expansion in var about f = mu,
    log Z = log p + var (g^2 + h) / 2, mean = mu + var g, variance = var + var^2 h, with g and h the
    first two derivatives of log p(y | f) at mu (so that the site keeps the likelihood's
    curvature -h as its precision); else nan (the sweeps skip such a site and the evidence is
    refused).  The two expectations are taken at f = mu."""
    if (math.isfinite(y) and math.isfinite(mu) and 0.0 <= var < math.inf and 0.0 < df < math.inf
            and 0.0 < scale < math.inf and (var == 0.0 or var < _T_S2_POINT * _t_curvature_scale2(df, scale))):
        r = y - mu
        width2 = df * scale * scale
        u = r * r / width2
        # d/df log p = (df + 1) r / (df s^2 + r^2), d2 = (df + 1) (r^2 - df s^2) / (df s^2 + r^2)^2,
        # written with u so that no r^2 + df s^2 overflows.
        g = (df + 1.0) * r / width2 / (1.0 + u)
        h = (df + 1.0) * (u - 1.0) / width2 / ((1.0 + u) * (1.0 + u))
        log_p = _student_t_log_norm(df, scale) - 0.5 * (df + 1.0) * math.log1p(u)
        return (log_p + 0.5 * var * (g * g + h), mu + var * g, var + var * var * h, log1p_excess(u),
                u / (1.0 + u))
    return math.nan, math.nan, math.nan, math.nan, math.nan


@njit(cache=True)
def _student_t_moments(y, mu, var, df, scale, extra):
    """(log Z, mean, variance, E[log(1 + u) - u / (1 + u)], E[u / (1 + u)], edges, count, loc, scale2, power, a,
    log mass) of Student-t(y | f, df, scale) N(f | mu, var) / Z, u = (y - f)^2 / (df scale^2), on
    the panels of :func:`_student_t_rule`; without ``extra`` the two expectations are nan.
    Parameters as checked by _student_t_ok."""
    edges, count, loc, s2, power, a = _student_t_rule(y, mu, var, df, scale)
    log_mass, mean_x, var_x, e1, e2 = _moments_on_edges(STUDENT_T, loc, s2, power, edges, count, extra)
    # Z = a C / sqrt(2 pi var) int (1 + x^2)^-power exp(-(x - loc)^2 / (2 s2)) dx, a C = Gamma(power) /
    # (Gamma(df/2) sqrt(pi)); log Gamma(power) - log Gamma(df/2) by the excess, which is stable at
    # large df (the two lgammas differenced lose ~1e-16 df log df: an evidence of +22 at df 1e20).
    log_z = (log_mass + student_t_log_norm_excess(df) + 0.5 * math.log(0.5 * df) - 0.5 * math.log(math.pi)
             - 0.5 * math.log(2.0 * math.pi * var))
    return log_z, y + a * mean_x, a * a * var_x, e1, e2, edges, count, loc, s2, power, a, log_mass


@njit(cache=True)
def student_t_tilted_moments(y, mu, var, df, scale):
    """(log Z, mean, variance) of Student-t(y | f, df, scale) N(f | mu, var) / Z by quadrature
    (:func:`_student_t_rule`); nan for parameters that are not finite and positive."""
    if not _student_t_ok(y, mu, var, df, scale):
        log_z, mean, var_t, _, _ = _student_t_degenerate(y, mu, var, df, scale)
        return log_z, mean, var_t
    r = _student_t_moments(y, mu, var, df, scale, bool(False))
    return r[0], r[1], r[2]


@njit(cache=True)
def _student_t_qp(y, mu, var, df, scale):
    """(log Z, mean, sigma*^2) of the Student-t tilted distribution (QP), sigma* on the panels of
    the moments (in x, times a)."""
    if not _student_t_ok(y, mu, var, df, scale):
        log_z, mean, var_t, _, _ = _student_t_degenerate(y, mu, var, df, scale)
        return log_z, mean, var_t
    log_z, mean, _, _, _, edges, count, loc, s2, power, a, log_mass = _student_t_moments(y, mu, var, df, scale,
                                                                                       bool(False))
    sd = a * _wasserstein_sd_edges(STUDENT_T, loc, s2, power, log_mass, edges, count)
    return log_z, mean, sd * sd


@njit(cache=True)
def student_t_qp_sd(y, mu, sd, df, scale):
    """QP standard deviation sigma* (eq. 7) of Student-t(y | f, df, scale) N(f | mu, sd^2) / Z."""
    return math.sqrt(_student_t_qp(y, mu, sd * sd, df, scale)[2])


@njit(cache=True, inline="always")     # as probit_project
def student_t_project(y, mu, var, df, scale, qp):
    """(log Z, mean, variance) of the Student-t tilted distribution with cavity N(mu, var): EP's
    moments, or with ``qp`` the QP variance sigma*^2 in place of EP's."""
    if qp:
        return _student_t_qp(y, mu, var, df, scale)
    return student_t_tilted_moments(y, mu, var, df, scale)


# ----------------------------------------------------------------------------------------------
# dispatch


@njit(cache=True)
def gaussian_tilted_moments(y, mu, var, noise):
    """(log Z, mean, variance) of N(y | f, noise) N(f | mu, var) / Z: Gaussian, so EP is exact and
    QP's projection equals EP's."""
    total = var + noise
    r = y - mu
    return -0.5 * (math.log(2.0 * math.pi * total) + r * r / total), mu + var * r / total, var * noise / total


def _project_any(kind, y, mu, var, param, qp):
    """The projection of :func:`project`, chosen by the type of ``param``; for jitted callers
    only (implemented by :func:`_project_by_param`)."""
    return run_overload(_project_by_param, kind, y, mu, var, param, qp)


@overload(_project_any, inline="always")
def _project_by_param(kind, y, mu, var, param, qp):
    if isinstance(param, types.BaseTuple):
        return lambda kind, y, mu, var, param, qp: site_projection(kind, y, mu, var, param, qp)
    return lambda kind, y, mu, var, param, qp: _project_scalar(kind, y, mu, var, param, qp)


@njit(cache=True)
def _project_scalar(kind, y, mu, var, param, qp):
    if kind == PROBIT:
        return probit_project(y, mu, var, param, qp)
    if kind == GAUSSIAN:
        return gaussian_tilted_moments(y, mu, var, param)
    if kind == LOGIT:
        return logit_project(y, mu, var, param, qp)
    if kind == STUDENT_T:                     # needs two parameters: see project()
        return math.nan, math.nan, math.nan
    return poisson_square_project(y, mu, var, qp)


@njit(cache=True)
def project(kind, y, mu, var, param, qp):
    """Project the tilted distribution of one site onto a Gaussian.

    kind: PROBIT or LOGIT (y = +-1, ``param`` is the bias added to f), POISSON_SQUARE (y a count,
    ``param`` unused), GAUSSIAN (``param`` is the noise variance) or STUDENT_T (``param`` the
    tuple (df, scale); with a float, nan); ``param`` may also be the likelihood's parameter tuple
    of :func:`site_projection`.  mu, var: cavity mean and variance.  Returns (log Z, mean,
    variance): the EP moments, or with ``qp`` the same log Z and mean and the QP variance
    sigma*^2.  Every likelihood's code is compiled in (``kind`` is a run-time value); the sweeps
    of a fit use :func:`site_projection`.
    """
    return _project_any(kind, y, mu, var, param, qp)


@njit(cache=True)
def site_projection(kind, y, mu, var, params, quantile):
    """:func:`project` for the sweeps of a fit, compiled with only the code the fit uses.

    ``params`` is the tuple of the likelihood's parameters: () for POISSON_SQUARE, (bias,) for
    PROBIT and LOGIT, (noise variance,) for GAUSSIAN, (df, scale) for STUDENT_T; ``quantile`` is
    None for EP, or a bool (QP's projection if True, EP's if False).  Numba drops the branches
    that the *types* of the arguments rule out before typing them (the length of a tuple and
    ``is None`` of a None argument are constants to it), so a Poisson fit compiles none of the
    probit's code, a probit fit none of Poisson's or the Student-t's, and an EP fit none of QP's
    quadrature.  LOGIT is told from PROBIT and GAUSSIAN (one parameter each) by the *type* of
    ``kind`` (the constant LOGIT is a numpy uint8, the other codes Python ints), so that a probit
    fit compiles none of the logit's quadrature and a logit fit none of the probit's; PROBIT and
    GAUSSIAN are told apart at run time, as are EP and QP for a bool ``quantile``: the EP and QP
    sweeps of a QP fit share one compiled kernel.  A plain int 3 raises ValueError here (pass
    LOGIT itself); :func:`project` takes any int.
    """
    if len(params) == 0:
        if quantile is None:
            return poisson_square_tilted_moments(y, mu, var)
        return poisson_square_project(y, mu, var, quantile)
    if len(params) == 2:
        if quantile is None:
            return student_t_tilted_moments(y, mu, var, params[0], params[1])
        return student_t_project(y, mu, var, params[0], params[1], quantile)
    return _one_parameter_projection(kind, y, mu, var, params[0], quantile)


_PLAIN_LOGIT = ("site_projection / tilted_log_z_param_gradient / project_tabulated: the logit code must be "
                "passed as gpdsl._jit.projections.LOGIT (a numpy uint8, which selects the logit quadrature at "
                "compile time), not as a Python int")


def _one_parameter_projection(kind, y, mu, var, param, quantile):
    """site_projection's one-parameter kinds, chosen by the types of ``kind`` and ``quantile``;
    for jitted callers only (implemented by :func:`_one_parameter_by_type`)."""
    return run_overload(_one_parameter_by_type, kind, y, mu, var, param, quantile)


@overload(_one_parameter_projection, inline="always")
def _one_parameter_by_type(kind, y, mu, var, param, quantile):
    ep = isinstance(quantile, types.NoneType)
    if kind == _LOGIT_TYPE:
        if ep:
            return lambda kind, y, mu, var, param, quantile: logit_tilted_moments(y, mu, var, param)
        return lambda kind, y, mu, var, param, quantile: logit_project(y, mu, var, param, quantile)
    if ep:
        def probit_or_gaussian(kind, y, mu, var, param, quantile):
            if kind == GAUSSIAN:
                return gaussian_tilted_moments(y, mu, var, param)
            if kind == LOGIT:
                raise ValueError(_PLAIN_LOGIT)
            return probit_tilted_moments(y, mu, var, param)
        return probit_or_gaussian

    def probit_or_gaussian_qp(kind, y, mu, var, param, quantile):
        if kind == GAUSSIAN:
            return gaussian_tilted_moments(y, mu, var, param)
        if kind == LOGIT:
            raise ValueError(_PLAIN_LOGIT)
        return probit_project(y, mu, var, param, quantile)
    return probit_or_gaussian_qp


# ----------------------------------------------------------------------------------------------
# gradients of log Z in the likelihood's parameters


@njit(cache=True)
def probit_log_z_bias_gradient(y, mu, var, bias):
    """d log Z / d bias of the probit site: y r / sqrt(1 + var), r = phi(z) / Phi(z) (the same as
    d log Z / d mu)."""
    c = math.sqrt(1.0 + var)
    r, _ = _probit_ratio(y * (mu + bias) / c)
    return y * r / c


@njit(cache=True)
def logit_log_z_bias_gradient(y, mu, var, bias):
    """d log Z / d bias of the logit site: E_tilted[y sigma(-y (f + bias))] (= d log Z / d mu),
    integrated directly (all terms positive, so it keeps its relative accuracy where
    sigma(-g) ~ e^-30)."""
    if not _logit_ok(y, mu, var, bias):
        return y * _logit_degenerate(y, mu, var, bias)[3]
    return y * _logit_rule(y, mu, var, bias, bool(True))[3]


@njit(cache=True)
def gaussian_log_z_noise_gradient(y, mu, var, noise):
    """d log Z / d noise variance of the Gaussian site: (r^2 / (var + noise) - 1) / (2 (var + noise))."""
    total = var + noise
    r = y - mu
    return 0.5 * (r * r / total - 1.0) / total


@njit(cache=True)
def student_t_log_z_gradient(y, mu, var, df, scale):
    """(d log Z / d df, d log Z / d scale) of the Student-t site: the tilted expectations of
    d log p / d theta, with u = (y - f)^2 / (df scale^2),
    d/d df = (psi((df+1)/2) - psi(df/2) - 1/df - [log(1 + u) - u / (1 + u)] + u / (df (1 + u))) / 2 and
    d/d scale = ((df + 1) u / (1 + u) - 1) / scale.  The df gradient tends to 0 like 1/df^2; its
    two differences (of the digammas less 1/df, and in the bracket) are formed without
    cancellation (gpdsl._jit.special's digamma_half_excess and log1p_excess), so it keeps its
    relative accuracy at any df."""
    if _student_t_ok(y, mu, var, df, scale):
        r = _student_t_moments(y, mu, var, df, scale, bool(True))
        e1, e2 = r[3], r[4]
    else:
        _, _, _, e1, e2 = _student_t_degenerate(y, mu, var, df, scale)
    g_df = 0.5 * (digamma_half_excess(df) - e1 + e2 / df)
    g_scale = ((df + 1.0) * e2 - 1.0) / scale
    return g_df, g_scale


@njit(cache=True)
def tilted_log_z_param_gradient(kind, y, mu, var, params):
    """d log Z_i / d theta at a fixed cavity N(mu, var), a tuple as long as ``params`` (the
    likelihood's parameter tuple of :func:`site_projection`): (d / d bias,) for PROBIT and LOGIT,
    (d / d noise variance,) for GAUSSIAN, (d / d df, d / d scale) for STUDENT_T, () for
    POISSON_SQUARE.  Each is E_tilted[d log p(y | f) / d theta]; for a bias it equals
    d log Z / d mu.  Specialised like :func:`site_projection` (tuple length at compile time, the
    one-parameter kinds by ``kind`` at run time).

    At an EP fixed point the sites are stationary points of the EP evidence, so its gradient in
    the likelihood's parameters is sum_i of these at the final cavities.
    """
    if len(params) == 0:
        return ()
    if len(params) == 2:
        return student_t_log_z_gradient(y, mu, var, params[0], params[1])
    return (_one_parameter_gradient(kind, y, mu, var, params[0]),)


def _one_parameter_gradient(kind, y, mu, var, param):
    """tilted_log_z_param_gradient's one-parameter kinds, chosen like _one_parameter_projection."""
    return run_overload(_one_parameter_gradient_by_type, kind, y, mu, var, param)


@overload(_one_parameter_gradient, inline="always")
def _one_parameter_gradient_by_type(kind, y, mu, var, param):
    if kind == _LOGIT_TYPE:
        return lambda kind, y, mu, var, param: logit_log_z_bias_gradient(y, mu, var, param)

    def probit_or_gaussian(kind, y, mu, var, param):
        if kind == GAUSSIAN:
            return gaussian_log_z_noise_gradient(y, mu, var, param)
        if kind == LOGIT:
            raise ValueError(_PLAIN_LOGIT)
        return probit_log_z_bias_gradient(y, mu, var, param)
    return probit_or_gaussian


# ----------------------------------------------------------------------------------------------
# lookup tables (paper appendix J)


@njit(cache=True)
def probit_qp_ratio_table(mu_grid, log10_sd_grid):
    """Table (n_mu, n_sd) of sigma*/sigma_EP for y = +1, bias 0 on the given grids.

    A site with label y, bias b and cavity (mu, sd) reads it at (y (mu + b), log10 sd): the
    tilted distribution in g = y (f + b) is the y = +1, bias 0 one with cavity mean y (mu + b),
    and sigma* and sigma_EP are invariant under that map.  The ratio (0.98..1 for the probit) is
    smoother than sigma* itself, so bilinear interpolation of it loses less.
    """
    table = np.empty((mu_grid.shape[0], log10_sd_grid.shape[0]))
    for i in range(mu_grid.shape[0]):
        for j in range(log10_sd_grid.shape[0]):
            sd = 10.0 ** log10_sd_grid[j]
            log_z, mean, var_t = probit_tilted_moments(1.0, mu_grid[i], sd * sd, 0.0)
            table[i, j] = _probit_qp_sd(1.0, mu_grid[i], sd, 0.0, log_z, mean, var_t) / math.sqrt(var_t)
    return table


@njit(cache=True)
def probit_qp_sd_lookup(table, mu_first, mu_step, log10_sd_first, log10_sd_step, y, mu, sd, bias):
    """sigma* by bilinear interpolation of ``probit_qp_ratio_table`` on uniform grids.

    The grids are mu_first + i mu_step and log10_sd_first + j log10_sd_step; a cavity outside
    them is computed directly (the paper falls back to sigma_EP there instead).
    """
    log_z, mean, var_t = probit_tilted_moments(y, mu, sd * sd, bias)
    u = (y * (mu + bias) - mu_first) / mu_step
    w = (math.log10(sd) - log10_sd_first) / log10_sd_step
    n_mu, n_sd = table.shape
    if not (0.0 <= u <= n_mu - 1.0 and 0.0 <= w <= n_sd - 1.0):
        return _probit_qp_sd(y, mu, sd, bias, log_z, mean, var_t)
    i = min(int(u), n_mu - 2)
    j = min(int(w), n_sd - 2)
    du = u - i
    dw = w - j
    ratio = ((1.0 - du) * ((1.0 - dw) * table[i, j] + dw * table[i, j + 1])
             + du * ((1.0 - dw) * table[i + 1, j] + dw * table[i + 1, j + 1]))
    return ratio * math.sqrt(var_t)


@njit(cache=True)
def project_tabulated(kind, y, mu, var, param, qp, table, grid):
    """:func:`project` for the sweeps given a lookup table (the probit QP fits with
    ``QP(lookup=True)``; the tests pass an empty one with the other one-parameter kinds), with the
    probit QP sigma* read from the table when it is not empty; ``grid`` = (mu_first, mu_step,
    log10_sd_first, log10_sd_step) of that table.  ``param`` is a float (0.0 for Poisson).  Like
    :func:`site_projection`, a plain int kind compiles the probit's, Poisson's and the Gaussian's
    code and LOGIT (its own type) the logit's alone; STUDENT_T (two parameters) gives nan."""
    if qp and kind == PROBIT and table.shape[0] > 0:
        log_z, mean, _ = probit_tilted_moments(y, mu, var, param)
        sd = probit_qp_sd_lookup(table, grid[0], grid[1], grid[2], grid[3], y, mu, math.sqrt(var), param)
        return log_z, mean, sd * sd
    return _tabulated_fallback(kind, y, mu, var, param, qp)


def _tabulated_fallback(kind, y, mu, var, param, qp):
    """project_tabulated's projection without the table, chosen by the type of ``kind``; for
    jitted callers only (implemented by :func:`_tabulated_fallback_by_type`)."""
    return run_overload(_tabulated_fallback_by_type, kind, y, mu, var, param, qp)


@overload(_tabulated_fallback, inline="always")
def _tabulated_fallback_by_type(kind, y, mu, var, param, qp):
    if kind == _LOGIT_TYPE:
        return lambda kind, y, mu, var, param, qp: logit_project(y, mu, var, param, qp)

    def probit_poisson_or_gaussian(kind, y, mu, var, param, qp):
        if kind == PROBIT:
            return probit_project(y, mu, var, param, qp)
        if kind == GAUSSIAN:
            return gaussian_tilted_moments(y, mu, var, param)
        if kind == POISSON_SQUARE:
            return poisson_square_project(y, mu, var, qp)
        if kind == LOGIT:
            raise ValueError(_PLAIN_LOGIT)
        return math.nan, math.nan, math.nan
    return probit_poisson_or_gaussian
