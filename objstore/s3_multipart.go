package objstore

import (
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// createMultipart writes an object larger than PartSize as a multipart
// upload: CreateMultipartUpload, UploadPart for each part in turn (each
// retried on its own: a part is idempotent), then CompleteMultipartUpload
// with If-None-Match: *, which publishes the object only if the name is
// free, atomically (versitygw re-checks the condition under its per-key
// publish lock; AWS S3 documents the same). The upload is aborted on every
// failure, so no parts are left behind to pay for.
//
// A lost answer to the completion is resolved like a PutObject's: a later
// attempt that finds the name taken (412), or the upload gone (404
// NoSuchUpload: our own completion applied and consumed it), reads the
// object back.
func (s *s3Store) createMultipart(ctx context.Context, name string, r io.ReaderAt, size int64) (err error) {
	key := aws.String(s.key(name))
	partSize := max(s.o.PartSize, (size+maxParts-1)/maxParts)
	var id *string
	if _, err := s.do(ctx, "CreateMultipartUpload", func(actx context.Context) (int64, error) {
		out, err := s.c.CreateMultipartUpload(actx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: key})
		if err == nil {
			id = out.UploadId
		}
		return 0, err
	}); err != nil {
		return fmt.Errorf("starting a multipart upload: %w", err)
	}
	published := false
	defer func() {
		if !published {
			s.abort(ctx, key, id)
		}
	}()
	var parts []types.CompletedPart
	for num, off := int32(1), int64(0); off < size; num, off = num+1, off+partSize {
		part, err := s.uploadPart(ctx, key, id, num, r, off, min(partSize, size-off))
		if err != nil {
			return err
		}
		parts = append(parts, part)
	}
	lost, err := s.do(ctx, "CompleteMultipartUpload", func(actx context.Context) (int64, error) {
		_, err := s.c.CompleteMultipartUpload(actx, &s3.CompleteMultipartUploadInput{
			Bucket: &s.bucket, Key: key, UploadId: id,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
			IfNoneMatch:     aws.String("*"),
		})
		return 0, err
	})
	if lost && isStatus(err, 404) { // NoSuchUpload: a lost completion consumed it
		err = fmt.Errorf("the upload is gone after a lost completion: %w", err)
	}
	if err = s.settle(ctx, name, r, size, lost, err); err == nil {
		published = true
	}
	return err
}

func (s *s3Store) uploadPart(ctx context.Context, key, id *string, num int32, r io.ReaderAt, off, n int64) (types.CompletedPart, error) {
	var part types.CompletedPart
	_, err := s.do(ctx, "UploadPart", func(actx context.Context) (int64, error) {
		out, err := s.c.UploadPart(actx, &s3.UploadPartInput{
			Bucket: &s.bucket, Key: key, UploadId: id, PartNumber: aws.Int32(num),
			Body: io.NewSectionReader(r, off, n), ContentLength: aws.Int64(n),
		})
		if err != nil {
			return 0, err
		}
		part = types.CompletedPart{
			PartNumber: aws.Int32(num), ETag: out.ETag,
		}
		return n, nil
	})
	if err != nil {
		return part, fmt.Errorf("uploading part %d (bytes %d..%d): %w", num, off, off+n, err)
	}
	return part, nil
}

// abort removes a multipart upload that will not be completed, under a
// context of its own so that a cancelled create still cleans up. A failure
// is logged: the parts stay until a bucket lifecycle rule aborts them.
func (s *s3Store) abort(ctx context.Context, key, id *string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	_, err := s.do(ctx, "AbortMultipartUpload", func(actx context.Context) (int64, error) {
		_, err := s.c.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: key, UploadId: id})
		return 0, err
	})
	if err != nil && !isStatus(err, 404) {
		s.o.Logger.Warn("objstore: aborting a multipart upload failed; its parts stay until a lifecycle rule removes them",
			"bucket", s.bucket, "key", aws.ToString(key), "upload", aws.ToString(id), "err", err)
	}
}
