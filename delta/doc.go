// Package delta is the codec of the sharded delta sync (issue 27): per
// message, a source sends only the elements of its region that changed
// since the version the destinations hold, and a destination applies the
// message in place. It is pure Go and knows nothing of transports: the
// runtime (refit/, session/) calls it around the messages it already
// plans.
//
// # Messages
//
// A message is what the runtime moves today as one transfer's chunk: a
// strided region of a source buffer (a strided.Desc, elements of 1, 2 or
// 4 bytes: bf16 is 2) going to a strided region of a destination buffer.
// Both descriptors list the same box in row-major order, but their runs
// may differ (other local shapes, views into fused weights), so the codec
// works on the message's logical elements, numbered in run order, and
// cuts them into blocks of BlockElems (256) elements; blocks cross runs
// freely. Elements are compared bit for bit: any changed bit pattern is a
// change (-0 against +0, one NaN payload against another), and equal bits
// are no change.
//
// # Encoding (version 1)
//
// A 24-byte header, little-endian: "M2ND", version 1, the element size,
// log2(BlockElems) = 8, flags 0, the element count (uint64) and the
// encoding's length in bytes, header included (uint64). Then ops, in
// block order, covering every block exactly once:
//
//	1 skip   uint32 k       the next k blocks are unchanged
//	2 dense  uint32 k       the next k blocks, every element (k*256*elem bytes, less at the end)
//	3 list   uint8 c-1      c increasing uint8 indices in the block, then c values: one block
//	4 bitmap ceil(n/8) B    bit i (byte i/8, bit i%8) marks element i, then one value per set bit: one block
//
// For each block the encoder picks the smallest: skip for an unchanged
// block, a list (2 + c*(1+elem) bytes for c changes), a bitmap
// (1 + n/8 + c*elem) or dense (n*elem, plus 5 where it opens a dense op);
// consecutive skips and dense blocks share one op. For bf16 a list wins up
// to 32 changes of 256 (12.5%), a bitmap up to 241, dense above. One
// shortcut trades exactness for speed: after a dense block, a block whose
// 8 sampled words (one per 32 elements) changed in full goes dense without
// counting the rest, so a fully changed message costs about a copy. A message
// never exceeds MaxEncodedLen: the dense encoding, which is the region's
// bytes plus 29 (the header and one dense op; 5 more per 2^32 blocks).
// Where block by block would exceed it (blocks just under dense's size in
// a row), Encode sends the message dense instead (Stats.Fallback).
//
// Measured sizes (TestSizes, 1 Mi bf16 elements; go test -run TestSizes
// -v ./delta/ prints the table): nothing changed 29 bytes; 1e-4 uniform
// 0.05% of the dense bytes; 1e-3 0.41%; 1% 1.93% (the target is at
// most 12%); 10% 15.3%; 50% 56.4% (bitmaps); 100% dense + 29 bytes.
// Clustered changes (runs of 64 elements) cost less: 1% 1.32%, 10% 12.8%.
// With 1-byte elements 1% uniform is 2.9% of the dense bytes, with 4-byte
// elements 1.5%.
//
// # Apply
//
// Apply checks the whole encoding before it writes anything (header,
// every op's counts against the blocks left, list indices increasing and
// inside the block, bitmap bits inside the block, every length against
// the bytes present, the ops ending exactly at the last block and at the
// header's length): a truncated, damaged or foreign encoding is a
// *CorruptError naming the byte and the block, and the destination is
// left as it was; it never panics or writes outside the region
// (FuzzApply compares it with a reference decoder). The codec carries no
// checksum of the values: a flipped value bit applies as a change, which
// the transport or the per-tensor CRC-32C of issue 27's versions catches.
//
// # What the source keeps: a copy, not a digest
//
// Each source keeps prev, a copy of what it last sent: 1x the bytes of
// the regions it sends (its local part, or the part it owns where source
// replicas stripe regions), in the same layout as its buffer, so that one
// descriptor serves prev and cur. Encode compares prev and cur 64 bytes
// at a time (the OR of eight 8-byte XORs), finds a word's changed elements
// from its XOR without a loop over them, and after an unchanged block
// compares whole blocks, and spans of 16 blocks, with the runtime's
// vector compare. With AVX2, whole blocks within one run are compared up
// to 32 at a time in one vector pass that yields a bit per element
// (blockDiffAVX2), and each block is then encoded from its bits.
//
// A per-block digest instead of the copy (8 bytes per block: 1.6% of the
// shard at 512-byte blocks) finds the changed blocks but not the changed
// elements, so every block with a change goes whole. RL updates change
// scattered elements: at 1% uniform changes a digest scheme sends 93% of
// the bytes with 512-byte blocks and 100% with 4 KiB blocks (1% clustered:
// 4.7% and 28%), against 1.93% from the copy (TestSizes prints both). Its
// scan is no cheaper either (CRC-32C over cur against comparing prev and
// cur: BenchmarkBaseline). So the copy it is; the digest only pays where
// memory is short and changes come in whole blocks.
//
// # How the runtime uses it
//
// Prepare: a call in delta mode allocates prev per source part and one
// Encoder per goroutine that encodes. Staging is unchanged: a message's
// encoding needs at most MaxEncodedLen, the dense bytes plus 29, so the
// existing pack buffers (one chunk each) hold it with 29 bytes of slack
// per chunk. Both sides cut transfers into the same chunks as today: each
// chunk is one message, its region known on both sides from the plan.
//
// First step, and any step after a destination joins or a step failed in
// non-atomic mode: a full sync. Encode with a nil prev writes every block
// dense (or the runtime sends its ordinary dense chunk), and Commit(prev,
// cur, r, elem) makes prev what was sent. A destination that joins gets
// full messages while the others get deltas: prev is the same for all of
// them after the step.
//
// Each later step: for each outgoing chunk, Encode(prev, cur, region,
// elem, staging) and send its first n bytes. What travels is the
// encoding only; the receiver knows the region and the element size from
// the plan and learns the length from the header:
//   - over MPI it posts a receive of MaxEncodedLen bytes (or probes the
//     message and allocates its count); EncodedLen(buf) reads the length
//     and Apply accepts the longer buffer;
//   - over NCCL, whose receives must name the count the sender sends,
//     the pairs first exchange their encodings' lengths (one small grouped
//     round of 8 bytes per pair and step), then move exactly those bytes.
//
// The refit runtime (refit/delta.go) takes the second way on every
// transport, MPI and in-process included (whose receives must match their
// sends' counts), and sends a message whose region changed at every
// sampled element dense, flagged in its length, without encoding it;
// where every rank finds every region it sends so (the ranks say so in
// the step's first collective), the whole step moves as a full sync, so
// that a fully changed step costs a full sync and the samples.
//
// With the hier route a leader forwards the encoding as it came to the
// other replicas of its domain, which hold the same version and apply it
// the same way.
//
// Non-atomic mode: Encoder.UpdatePrev copies each changed element of cur
// into prev as it is encoded (no second pass); if the step fails, the
// destinations may hold some of it, so the call's next step is a full
// sync. Destinations Apply each message on arrival, in place: no shadow,
// no extra memory beyond the receive buffer.
//
// Atomic mode: the step commits all at once or not at all, so prev must
// change only once it commits. Sources encode without UpdatePrev and, on
// commit, either Apply each message's encoding to prev (with the source's
// descriptor: the encoding is layout-free, and this touches only the
// changed blocks) or Commit(prev, cur) per region (a copy of the regions,
// where the encodings are gone); on abort prev is left alone and the next
// step encodes against it again. Destinations Check each message as it
// arrives (the verification before the commit agreement) and keep the
// encodings in place of the shadow buffers: a few percent of the shard at
// 1% changes where receives are sized by the header, and at most the
// shard plus 29 bytes per message (as much as a shadow) where they are
// posted at MaxEncodedLen. On commit each destination Applies them, which
// cannot fail for an encoding that passed Check; on abort it drops them.
//
// Memory, in sum: sources 1x their sent bytes for prev (the choice above),
// plus the same staging as a dense sync; destinations nothing extra in
// non-atomic mode, and in atomic mode the encodings instead of shadows.
//
// FP8 destinations (built: refit/deltaquant.go): the source keeps, per
// message, the FP8 codes it last sent (1-byte elements, contiguous) in
// place of the bf16 copy, quantizes its region each step with the step's
// scales and encodes the codes with elem 1 against the previous codes;
// the destination applies them to its FP8 region. The scales do not
// travel: every rank derives them from the step's amax exchange (package
// fp8 combines the amaxes of blocks that shard boundaries cut), and each
// destination writes its scale tensor whole (4 bytes per 128x128 block).
// Where a block's amax (and so its scale) is unchanged, only the codes of
// changed elements can differ, and many bf16 changes round to the same
// code, which the comparison of codes then drops; where the amax changed,
// the new scale changes most of the block's codes (63-85% at 1% uniform
// changes), but both sides hold the old codes and both scales, so
// both predict the new codes as the old codes' values quantized with the
// new scale (fp8.Grid.Rescale) and the source encodes against that
// prediction, which misses 21-27%: the old codes lost the bits that
// decide those roundings, so they must travel. Measured
// (TestFP8DeltaBytes in package pattern, the 8192x4096 tensor of `refit
// run --delta --dst-dtype e4m3`, 1% per step): 18 to 30 of 2048 blocks'
// scales move per step; the codes of the others cost 2.47% of the dense
// FP8 bytes (78% of the changed bf16 elements change their code, and an
// index costs as much as a 1-byte value: the floor of this encoding for
// 1-byte elements, against 1.93% for bf16), the moved blocks 0.7-1.6%
// more against the old codes and 0.35-0.7% against the rescaled ones:
// 2.8-3.2% in all, from 3.2-4.0% (in absolute bytes less than the bf16
// delta of the same tensor). Cost on a source: 2 bytes
// per sent element (the previous and the current codes) and a full
// quantization of its regions per step.
//
// # Speed
//
// BenchmarkEncode and BenchmarkApply run each density on 16 MiB of bf16
// against a plain copy of the same bytes (BenchmarkBaseline), reporting
// wall-clock and CPU-time MB/s; bench/results/delta-codec.txt holds the
// runs with their command. In its latest, after the AVX2 scan (2 cores, a
// quiet machine, copy 25.7 GB/s of CPU time), Encode ran at 12.0 GB/s of
// CPU time with nothing changed (0.47x a copy), 9.2 GB/s at 1e-4, 5.3 at
// 1e-3, 3.8 at 1% (0.15x; 2.1 GB/s in the file's first run, before the
// AVX2 scan, on a busier machine), 1.9 at 10%, 0.66 at 50% and 5.8 at
// 100%; Apply at 5.2 GB/s at 1% (0.20x; 6.1-8.2 on a busy machine since
// Apply places a block of a one-run region from its offset, against
// 3.4-4.2 before it, in the same session), 3.9 at 10%, 19.4 at 100%
// (0.76x), and far above a copy at 1e-3 and below (it touches only the
// changed blocks). Encode reads prev and cur once; it allocates nothing
// once its scratch is grown, and neither does Apply. The runtime should
// therefore encode on as many cores as it has messages (one Encoder each)
// and send a message dense, without encoding, where its last step's
// encoding was mostly dense.
package delta
